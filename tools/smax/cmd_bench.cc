// tools/smax/cmd_bench.cc: `smax bench --peers` - smax against its peers,
// by running the existing peer benchmarks of bench/peers/ (nothing is
// re-implemented here):
//   smax_peers      (C++, built next to the CLI when oneDNN or XNNPACK is
//                    installed: smax's own timings, oneDNN, XNNPACK, the
//                    naive loop and the memory floor)
//   bench_peers.py  (PyTorch, ONNX Runtime; needs numpy)
//   report.py       (merges the rounds: table.md, peers.json, peers.csv and,
//                    with matplotlib, peers.png)
// Before running anything it checks what each asked-for peer needs (the
// binary; the Python modules, found with importlib.util.find_spec, without
// importing them) and names every missing one with its install command.
//
// Contract: exit 0 when every asked-for peer (and matplotlib for --plot)
// was available and the files were written; exit 3 (kExitPeersMissing)
// when something asked for is missing: with at least one peer available the
// others still run and the files are written (missing peers are "missing"
// rows), with none nothing runs; exit 2 for bad arguments, no bench/peers
// directory, or a peer script that failed. stdout: the table (table.md);
// stderr: the missing peers, one line each "smax: missing peer NAME: ...".
#include <sys/stat.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "args.h"
#include "commands.h"
#include "suggest.h"

namespace smax_cli {
namespace {

const std::vector<std::string> kPeers = {"torch", "onnxruntime", "onednn", "xnnpack"};

bool is_file(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}
bool is_executable(const std::string& path) { return is_file(path) && access(path.c_str(), X_OK) == 0; }

std::string dirname_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

// The directory of the running executable (/proc/self/exe), or "".
std::string exe_dir() {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "";
  buf[n] = '\0';
  return dirname_of(buf);
}

// Runs argv (no shell), stdout to `out_path` when not empty, or captured
// into *captured when not null; returns the exit status (127: could not
// start; 128 + N: killed by signal N).
int run_process(const std::vector<std::string>& argv, const std::string& out_path,
                std::string* captured = nullptr) {
  int pipefd[2] = {-1, -1};
  if (captured != nullptr && pipe(pipefd) != 0) return 127;
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = fork();
  if (pid < 0) return 127;
  if (pid == 0) {
    if (!out_path.empty()) {
      const int fd = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd < 0 || dup2(fd, 1) < 0) _exit(127);
      close(fd);
    }
    if (captured != nullptr) {
      dup2(pipefd[1], 1);
      close(pipefd[0]);
      close(pipefd[1]);
    }
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    _exit(127);
  }
  if (captured != nullptr) {
    close(pipefd[1]);
    char buf[4096];
    ssize_t n;
    while ((n = read(pipefd[0], buf, sizeof(buf))) > 0) captured->append(buf, static_cast<size_t>(n));
    close(pipefd[0]);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 127;
}

// bench/peers/: --peers-dir, $SMAX_PEERS_DIR, <exe>/../share/smax/bench/peers
// (installed), <exe>/../bench/peers (a build directory inside the source
// tree), then the source tree the CLI was configured from.
std::string find_peers_dir(const Args& args) {
  std::vector<std::string> tried;
  auto ok = [](const std::string& d) { return is_file(d + "/bench_peers.py") && is_file(d + "/report.py"); };
  if (args.has("peers-dir")) {
    const std::string d = args.get("peers-dir", "");
    if (!ok(d)) throw UsageError("--peers-dir: '" + d + "' has no bench_peers.py and report.py");
    return d;
  }
  if (const char* env = std::getenv("SMAX_PEERS_DIR"); env != nullptr && *env) {
    if (!ok(env)) throw UsageError(std::string("SMAX_PEERS_DIR: '") + env + "' has no bench_peers.py and report.py");
    return env;
  }
  const std::string exe = exe_dir();
  std::vector<std::string> candidates = {exe + "/../share/smax/bench/peers", exe + "/../bench/peers"};
#ifdef SMAX_SOURCE_DIR
  candidates.push_back(std::string(SMAX_SOURCE_DIR) + "/bench/peers");
#endif
  for (const std::string& d : candidates) {
    if (ok(d)) return d;
  }
  std::string list;
  for (const std::string& d : candidates) list += (list.empty() ? "" : ", ") + d;
  throw UsageError("bench --peers: no bench/peers directory with bench_peers.py and report.py (tried " + list +
                   "); give --peers-dir DIR or set SMAX_PEERS_DIR");
}

// smax_peers: $SMAX_PEERS_BIN, or <exe>/bench/peers/smax_peers (the build tree).
std::string find_smax_peers() {
  if (const char* env = std::getenv("SMAX_PEERS_BIN"); env != nullptr && *env) return env;
  return exe_dir() + "/bench/peers/smax_peers";
}

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

struct Missing {
  std::string peer, why, install;
};

}  // namespace

const char* const kBenchHelp = R"HELP(usage: smax bench --peers [OPTIONS]

Compares smax with its peers by running the peer benchmarks of bench/peers/
(docs/benchmarking.md): smax_peers (C++: smax, oneDNN, XNNPACK, the naive
loop and the memory floor; built next to the CLI when oneDNN or XNNPACK is
installed), bench_peers.py (PyTorch, ONNX Runtime; needs numpy) and
report.py (table.md, peers.json, peers.csv; peers.png when matplotlib
imports). Prints the table; peer time / smax time > 1 means smax is faster.

  --peers          required: run the peer comparison
  --libs LIST      peers to run, comma-separated: torch, onnxruntime, onednn,
                   xnnpack (default: all)
  --out DIR        where the files go (default smax-peers; created)
  --plot           also draw DIR/peers.png (needs matplotlib: missing, it is
                   reported like a missing peer)
  --threads N      threads for every library (default 1)
  --rounds N       alternating rounds, median over them (default 1)
  --reps N         samples per library per round (default 5)
  --quick          four tiny cases (a smoke run, seconds)
  --cases LIST     op:AxB[:dimK],... (default: the scripts' case list)
  --python PY      the interpreter for the scripts (default $PYTHON, else python3)
  --peers-dir DIR  the bench/peers directory (default $SMAX_PEERS_DIR, else
                   next to the CLI: ../share/smax/bench/peers, ../bench/peers,
                   else the source tree the CLI was built from)
Checks first what each asked-for peer needs and prints one line per missing
one on stderr, "smax: missing peer NAME: WHY (install: COMMAND)".
$SMAX_PEERS_BIN overrides where smax_peers is looked for.
Exit status: 0 every asked-for peer ran; 3 something asked for is missing
(the available peers still run and the files are written; with none,
nothing runs); 2 bad arguments or a peer script failed.
)HELP";

int cmd_bench(int argc, char** argv, int first) {
  const Args args("smax bench",
                  {{"peers", false}, {"libs", true}, {"out", true}, {"plot", false}, {"threads", true},
                   {"rounds", true}, {"reps", true}, {"quick", false}, {"cases", true}, {"python", true},
                   {"peers-dir", true}, {"help", false}},
                  argc, argv, first);
  if (!args.has("peers")) {
    throw UsageError("bench: give --peers (the peer comparison is the only benchmark of `smax bench`; "
                     "`smax run` and `smax compare` time smax alone)");
  }
  std::vector<std::string> libs = args.has("libs") ? split_list(args.get("libs", "")) : kPeers;
  if (libs.empty()) throw UsageError("--libs: expected a comma-separated list of torch, onnxruntime, onednn, xnnpack");
  std::set<std::string> want;
  for (const std::string& l : libs) {
    if (std::find(kPeers.begin(), kPeers.end(), l) == kPeers.end()) {
      throw UsageError("--libs: unknown peer '" + l + "'" + did_you_mean(l, kPeers) +
                       " (expected torch, onnxruntime, onednn or xnnpack)");
    }
    if (!want.insert(l).second) throw UsageError("--libs: '" + l + "' given more than once");
  }
  const int threads = args.has("threads") ? parse_threads(args.get("threads", "")) : 1;
  const int rounds = args.has("rounds") ? parse_repeat("--rounds", args.get("rounds", "")) : 1;
  const int reps = args.has("reps") ? parse_repeat("--reps", args.get("reps", "")) : 5;
  const std::string out = args.get("out", "smax-peers");
  if (out.empty()) throw UsageError("--out: expected a directory, got ''");
  const bool plot = args.has("plot");
  const bool quick = args.has("quick");
  const std::string cases = args.get("cases", "");
  if (args.has("cases") && cases.empty()) throw UsageError("--cases: expected op:AxB[:dimK],..., got ''");
  const char* py_env = std::getenv("PYTHON");
  const std::string python = args.get("python", py_env != nullptr && *py_env ? py_env : "python3");
  const std::string dir = find_peers_dir(args);

  // What is there: the Python modules (find_spec: present, not imported).
  std::string absent_text;
  const int probe = run_process(
      {python, "-c",
       "import importlib.util, sys\n"
       "print(' '.join(m for m in sys.argv[1:] if importlib.util.find_spec(m) is None))",
       "numpy", "torch", "onnx", "onnxruntime", "matplotlib"},
      "", &absent_text);
  std::set<std::string> absent;
  const bool python_ok = probe == 0;
  if (python_ok) {
    for (const std::string& m : split_list([&] {
           std::string s = absent_text;
           for (char& c : s) c = (c == ' ' || c == '\n') ? ',' : c;
           return s;
         }())) {
      absent.insert(m);
    }
  }
  const std::string pip = python + " -m pip install ";
  std::vector<Missing> missing;
  auto need_modules = [&](const std::string& peer, const std::vector<std::string>& mods) {
    if (!python_ok) {
      missing.push_back({peer, "python interpreter '" + python + "' did not run", "give --python PY or set PYTHON"});
      return false;
    }
    std::string lack;
    for (const std::string& m : mods) {
      if (absent.count(m)) lack += (lack.empty() ? "" : " ") + m;
    }
    if (lack.empty()) return true;
    missing.push_back({peer, "python module(s) " + lack + " not found by " + python, pip + lack});
    return false;
  };
  std::vector<std::string> py_libs;
  for (const std::string& peer : {std::string("torch"), std::string("onnxruntime")}) {
    if (!want.count(peer)) continue;
    const std::vector<std::string> mods =
        peer == "torch" ? std::vector<std::string>{"numpy", "torch"}
                        : std::vector<std::string>{"numpy", "onnx", "onnxruntime"};
    if (need_modules(peer, mods)) py_libs.push_back(peer);
  }
  const std::string smax_peers = find_smax_peers();
  const bool want_cpp = want.count("onednn") || want.count("xnnpack");
  const bool have_cpp = want_cpp && is_executable(smax_peers);
  if (want_cpp && !have_cpp) {  // one line for both: they come from the one binary
    std::string peers;
    for (const char* peer : {"onednn", "xnnpack"}) {
      if (want.count(peer)) peers += (peers.empty() ? "" : ", ") + std::string(peer);
    }
    missing.push_back({peers, "smax_peers (smax's own timings, oneDNN, XNNPACK) is not built at " + smax_peers,
                       "apt-get install libdnnl-dev libxnnpack-dev libpthreadpool-dev, re-run cmake "
                       "(-DSMAX_BUILD_BENCHMARKS=ON) and build smax_peers; or scripts/bench_peers.sh"});
  }
  if (plot && (!python_ok || absent.count("matplotlib"))) {
    missing.push_back({"matplotlib", "--plot needs matplotlib, not found by " + python, pip + "matplotlib"});
  }
  for (const Missing& m : missing) {
    std::fprintf(stderr, "smax: missing peer %s: %s (install: %s)\n", m.peer.c_str(), m.why.c_str(),
                 m.install.c_str());
  }
  if (py_libs.empty() && !have_cpp) {
    std::fprintf(stderr, "smax: bench --peers: none of the asked-for peers is available; nothing ran\n");
    return kExitPeersMissing;
  }
  if (!have_cpp) {
    std::fprintf(stderr, "smax: note: without smax_peers the table has no smax timings (ratios need them)\n");
  }

  const std::string raw = out + "/raw";
  std::error_code ec;
  std::filesystem::create_directories(raw, ec);
  if (ec) throw UsageError("--out: cannot create '" + raw + "': " + ec.message());
  std::vector<std::string> files;
  auto common = [&](std::vector<std::string> v, const std::string& json) {
    v.insert(v.end(), {"--threads", std::to_string(threads), "--reps", std::to_string(reps)});
    if (quick) v.push_back("--quick");
    if (!cases.empty()) v.insert(v.end(), {"--cases", cases});
    v.insert(v.end(), {"--json", json});
    return v;
  };
  for (int r = 1; r <= rounds; ++r) {
    if (have_cpp) {
      const std::string f = raw + "/cpp-r" + std::to_string(r) + ".json";
      std::fprintf(stderr, "smax: bench --peers: round %d/%d: smax_peers\n", r, rounds);
      const int rc = run_process(common({smax_peers}, f), "");
      if (rc != 0) throw UsageError("bench --peers: " + smax_peers + " failed (exit status " + std::to_string(rc) + ")");
      files.push_back(f);
    }
    if (!py_libs.empty()) {
      std::string list;
      for (const std::string& l : py_libs) list += (list.empty() ? "" : ",") + l;
      const std::string f = raw + "/py-r" + std::to_string(r) + ".json";
      std::fprintf(stderr, "smax: bench --peers: round %d/%d: bench_peers.py (%s)\n", r, rounds, list.c_str());
      const int rc = run_process(common({python, dir + "/bench_peers.py", "--libs", list}, f), "");
      if (rc != 0) throw UsageError("bench --peers: bench_peers.py failed (exit status " + std::to_string(rc) + ")");
      files.push_back(f);
    }
  }
  std::vector<std::string> report = {python, dir + "/report.py", "--out", out};
  report.insert(report.end(), files.begin(), files.end());
  const std::string table = out + "/table.md";
  const int rc = run_process(report, table);
  if (rc != 0) throw UsageError("bench --peers: report.py failed (exit status " + std::to_string(rc) + ")");
  std::ifstream in(table);
  std::cout << in.rdbuf();
  std::cout.flush();
  std::fprintf(stderr, "smax: bench --peers: wrote %s/table.md, peers.json, peers.csv%s\n", out.c_str(),
               plot && missing.empty() ? ", peers.png" : "");
  return missing.empty() ? kExitOk : kExitPeersMissing;
}

}  // namespace smax_cli
