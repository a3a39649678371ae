fsdpp_suite(models_tests models/models_test.cpp)
