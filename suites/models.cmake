fsdpp_suite(models_tests models/models_test.cpp models/generate_test.cpp)
