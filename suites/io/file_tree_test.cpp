// io::remove_tree: what TempDir and checkpoint pruning use instead of remove_all.
#include "core/io/file_tree.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>

#include "harness/testing/temp_dir.h"

namespace fsdpp {
namespace {

namespace fs = std::filesystem;

TEST(RemoveTree, RemovesNestedFilesAndDirectoriesButNotWhatALinkPointsTo) {
  harness::TempDir dir;
  const fs::path tree = dir.path() / "tree", outside = dir.path() / "outside";
  fs::create_directories(tree / "a" / "b" / "c");
  fs::create_directories(outside);
  std::ofstream(tree / "a" / "file") << "x";
  std::ofstream(tree / "a" / "b" / "c" / "deep") << "y";
  std::ofstream(outside / "kept") << "z";
  fs::create_directory_symlink(outside, tree / "a" / "link");
  std::error_code error;
  EXPECT_TRUE(io::remove_tree(tree, error)) << error.message();
  EXPECT_FALSE(fs::exists(tree));
  EXPECT_TRUE(fs::exists(outside / "kept"));  // the link went, not its target's content
}

TEST(RemoveTree, AMissingPathIsNotAnErrorAndAPlainFileIsRemoved) {
  harness::TempDir dir;
  std::error_code error;
  EXPECT_TRUE(io::remove_tree(dir.path() / "missing", error));
  EXPECT_FALSE(error) << error.message();
  std::ofstream(dir.path() / "file") << "x";
  io::remove_tree(dir.path() / "file");
  EXPECT_FALSE(fs::exists(dir.path() / "file"));
}

TEST(RemoveTree, AFailureIsReportedWithThePath) {
  if (::geteuid() == 0) GTEST_SKIP() << "root ignores directory permissions: the failure cannot be provoked";
  harness::TempDir dir;
  const fs::path locked = dir.path() / "locked";
  fs::create_directories(locked / "inner");
  std::ofstream(locked / "inner" / "file") << "x";
  fs::permissions(locked / "inner", fs::perms::owner_read | fs::perms::owner_exec);
  try {
    io::remove_tree(locked);
    ADD_FAILURE() << "removed a tree with a directory it may not change";
  } catch (const fs::filesystem_error& e) {
    EXPECT_NE(std::string(e.what()).find(locked.string()), std::string::npos) << e.what();
  }
  fs::permissions(locked / "inner", fs::perms::owner_all);
}

}  // namespace
}  // namespace fsdpp
