// The docs test's hidden modes (harness/cli/parse_only.h): FSDPP_PARSE_ONLY=1 parses and
// checks a command line as a run would, with paths that need not exist, and runs nothing;
// FSDPP_LIST_FLAGS=1 lists every subcommand and long flag.
#include "harness/cli/parse_only.h"

#include <CLI/CLI.hpp>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "harness/testing/temp_dir.h"
#include "suites/cli/fsdpp_binary.h"

namespace fsdpp {
namespace {

using harness::run_shell;
using harness::TempDir;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// Parses args (without the program name) with app; the error CLI11 threw, or "".
std::string parse_error(CLI::App& app, std::vector<std::string> args) {
  std::reverse(args.begin(), args.end());  // CLI11 takes a vector in reverse order
  try {
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    return e.what();
  }
  return "";
}

TEST(SkipPathChecks, TurnsOffOnlyTheChecksThatAPathExistsInEverySubcommand) {
  CLI::App app;
  std::string file, dir;
  int count = 0;
  auto* sub = app.add_subcommand("sub");
  sub->add_option("--file", file)->check(CLI::ExistingFile);
  sub->add_option("--dir", dir)->check(CLI::ExistingDirectory);
  sub->add_option("--count", count)->check(CLI::Range(1, 3));
  std::string nested_path;  // a subcommand of a subcommand, as `fsdpp results compare`
  app.add_subcommand("outer")->add_subcommand("inner")->add_option("--path", nested_path)->check(CLI::ExistingPath);
  const std::vector<std::string> missing{"sub", "--file", "/no/such/file", "--dir", "/no/such/dir", "--count", "2"};
  const std::vector<std::string> nested{"outer", "inner", "--path", "/no/such/path"};
  EXPECT_THAT(parse_error(app, missing), HasSubstr("/no/such/file"));
  EXPECT_THAT(parse_error(app, nested), HasSubstr("/no/such/path"));

  cli::skip_path_checks(app);
  EXPECT_EQ(parse_error(app, missing), "");
  EXPECT_EQ(file, "/no/such/file");
  EXPECT_EQ(parse_error(app, nested), "");
  EXPECT_EQ(nested_path, "/no/such/path");
  EXPECT_THAT(parse_error(app, {"sub", "--file", "/no/such/file", "--count", "9"}), HasSubstr("--count"));
}

TEST(ListFlags, PrintsEachSubcommandPathAndEachLongNameButNotHelpOrPositionals) {
  CLI::App app;
  bool flag = false;
  std::string value, positional;
  app.add_flag("--top", flag);
  auto* train = app.add_subcommand("train");
  train->add_option("--lr,--max-lr", value);
  train->add_option("-s,--seed", value);
  train->add_option("file", positional);
  auto* results = app.add_subcommand("results");
  results->add_subcommand("compare")->add_option("--window", value);

  std::FILE* out = std::tmpfile();
  ASSERT_NE(out, nullptr);
  cli::list_flags(app, out);
  std::rewind(out);
  std::string listed;
  for (int c; (c = std::fgetc(out)) != EOF;) listed += static_cast<char>(c);
  std::fclose(out);
  EXPECT_EQ(listed,
            "fsdpp --top\n"
            "fsdpp train\n"
            "fsdpp train --lr\n"
            "fsdpp train --max-lr\n"
            "fsdpp train --seed\n"
            "fsdpp results\n"
            "fsdpp results compare\n"
            "fsdpp results compare --window\n");
}

TEST(ParseOnlyMode, AcceptsACompleteCommandWithPlaceholderPathsAndRunsNothing) {
  // Without the mode this fails reading the model folder; with it nothing is read or run.
  auto [code, output] = run_shell("FSDPP_PARSE_ONLY=1 " + kFsdpp + " eval --model '<dir>' --data '<file>' --seq-len 8");
  EXPECT_EQ(code, 0) << output;
  EXPECT_EQ(output, "");
  auto [run_code, run_output] = run_shell(kFsdpp + " eval --model /no/such/dir --data /no/such/file --seq-len 8");
  EXPECT_NE(run_code, 0) << run_output;
  // A launch is not started either: no rank prints its world line.
  auto [launch_code, launch_output] = run_shell("FSDPP_PARSE_ONLY=1 " + kFsdpp + " selfcheck --nproc 2");
  EXPECT_EQ(launch_code, 0) << launch_output;
  EXPECT_EQ(launch_output, "");
}

TEST(ParseOnlyMode, KeepsEveryOtherCheckAsOneErrorLineAndExit2) {
  const std::string parse_only = "FSDPP_PARSE_ONLY=1 " + kFsdpp;
  const std::vector<std::pair<std::string, std::string>> cases{
      {" train --from-scratch --model-size tiny --data x --max-steps 2 --no-such-flag", "--no-such-flag"},
      {" eval --model x --data y --seq-len 0", "--seq-len"},                                         // a validator
      {" train --from-scratch --model-size tiny --max-steps 2", "--data is required"},               // TrainConfig
      {" train --from-scratch --model-size tiny --data x --max-steps 2 --strategy fsdp", "'fsdp'"},  // finish_config
      {" train --from-scratch --model-size tiny --data x --max-steps 2 --adam-beta1 1",
       "--adam-beta1 must be in [0, 1)"},
      {" train --from-scratch --model-size tiny --data x --max-steps 2 --adam-beta2 1",
       "--adam-beta2 must be in [0, 1)"},
      {" data prepare --input x --output y", "--tokenizer is required"},  // check()
      {" bench --preset smoke", "--out FILE is required"},
      {" nosuchcommand", "A subcommand is required"}};
  for (const auto& [args, expected] : cases) {
    SCOPED_TRACE(args);
    auto [code, output] = run_shell(parse_only + args);
    EXPECT_EQ(code, 2) << output;
    EXPECT_THAT(output, StartsWith("fsdpp: error: "));
    EXPECT_EQ(std::count(output.begin(), output.end(), '\n'), 1) << output;
    EXPECT_THAT(output, HasSubstr(expected));
  }
}

TEST(ParseOnlyMode, ExpandsAConfigFileThatExistsAndSkipsAPlaceholderOne) {
  TempDir dir("parse-only");
  const auto config = dir / "train.yaml";
  std::ofstream(config) << "from_scratch: true\nmodel_size: tiny\ndata: x\nmax_steps: 2\nno_such_option: 1\n";
  auto [code, output] = run_shell("FSDPP_PARSE_ONLY=1 " + kFsdpp + " train --config " + config.string());
  EXPECT_EQ(code, 2) << output;
  EXPECT_THAT(output, HasSubstr("unknown option 'no_such_option'"));
  auto [placeholder_code, placeholder_output] =
      run_shell("FSDPP_PARSE_ONLY=1 " + kFsdpp + " train --config '<file>' --max-steps 5");
  EXPECT_EQ(placeholder_code, 0) << placeholder_output;
}

TEST(ListFlagsMode, ListsTheRealCommandsFlagsAndRunsNothing) {
  auto [code, output] = run_shell("FSDPP_LIST_FLAGS=1 " + kFsdpp);
  ASSERT_EQ(code, 0) << output;
  EXPECT_THAT(output, StartsWith("fsdpp --version\n"));
  for (const char* line : {"\nfsdpp train --data\n", "\nfsdpp train --max-lr\n", "\nfsdpp data prepare --input\n",
                           "\nfsdpp results compare --window\n", "\nfsdpp selfcheck --nproc\n"})
    EXPECT_THAT(output, HasSubstr(line));
  EXPECT_THAT(output, ::testing::Not(HasSubstr("--help")));
}

}  // namespace
}  // namespace fsdpp
