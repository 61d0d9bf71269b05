// The sub-commands of the `tessera` command-line tool. Each takes the arguments after its name
// (argv[0] is the command name) and returns the process exit status: 0 when the command did its
// job, 1 when it could not, 2 on bad usage.
#pragma once

int tessera_cli_devices(int argc, char** argv);
int tessera_cli_plugins(int argc, char** argv);
int tessera_cli_doctor(int argc, char** argv);
int tessera_cli_ops(int argc, char** argv);
// `tessera check`: the conformance kit against one device (tools/tessera/check.cpp).
int tessera_cli_check(int argc, char** argv);
// `tessera graph` and `tessera run`: program files (tools/tessera/program.cpp).
int tessera_cli_graph(int argc, char** argv);
int tessera_cli_run(int argc, char** argv);

constexpr int kCliOk = 0;
constexpr int kCliFailure = 1;
constexpr int kCliUsage = 2;
