#!/usr/bin/env python3
"""scripts/doc_blocks.py: every code block of README.md and docs/*.md runs.

The docs cannot go stale if CI runs what they show. This script finds the
fenced code blocks of README.md and docs/*.md and checks them by language:

  fences    every block names its language (```text for output and trees)
  compile   ```c / ```cpp blocks are compiled and linked against an installed
            smax prefix with the flags of its smax.pc and run; ```cmake blocks
            are configured and built as a project against that prefix
  shell     ```sh blocks run under bash -euo pipefail, in a scratch folder that
            mirrors the repository with `build/` pointing at a build tree
  python    lists the ```python blocks (python/tests/test_docs.py runs them,
            one pytest case each, against the installed package)

Conventions (docs/design.md, "Code blocks in the docs"):
  * A block is self-contained: it defines every name it uses.
  * A ```c or ```cpp block without an `int main(` is the body of main(): the
    runner puts it inside `int main(void) { ... return 0; }` after a prelude
    that includes <smax/c/smax.h> (C) or <smax/smax.h> (C++) and the usual
    standard headers (PRELUDE_C / PRELUDE_CPP below).
  * A ```cmake block is the body of a CMakeLists.txt after
    `project(doc_block C CXX)` and `add_executable(app main.cc)`.
  * The line `<!-- doc-test: skip: REASON -->` just before a fence leaves that
    block out (e.g. the commands that run the whole suite, or install into
    the system), and says why.
  * The line `<!-- doc-test: requires: MODULE[, MODULE] -->` just before a
    ```python or ```sh fence names optional Python packages the block
    imports or runs (e.g. transformers, torch): test_docs.py and `shell`
    skip the block, saying so, where one is not installed (scripts/test.sh
    installs them before CTest, so they run in CI).

  scripts/doc_blocks.py fences
  scripts/doc_blocks.py compile --prefix PREFIX [--cc gcc] [--cxx g++] [--work DIR]
  scripts/doc_blocks.py shell --build-dir build [--work DIR]
  scripts/doc_blocks.py list [--lang python]
Exit status 0 when every checked block passes; the output names each block
as FILE:LINE.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUNNABLE = {"c", "cpp", "cmake", "sh", "python"}
# Languages a fence may name: the runnable ones and those never run.
KNOWN = RUNNABLE | {"text", "console"}
ALIASES = {"c++": "cpp", "bash": "sh", "shell": "sh", "py": "python"}
SKIP_RE = re.compile(r"^<!--\s*doc-test:\s*skip:\s*(.+?)\s*-->\s*$")
REQUIRES_RE = re.compile(r"^<!--\s*doc-test:\s*requires:\s*(.+?)\s*-->\s*$")

PRELUDE_C = """#include <smax/c/smax.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
"""
PRELUDE_CPP = """#include <smax/smax.h>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <optional>
#include <vector>
"""


@dataclass
class Block:
    path: Path
    line: int  # 1-based line of the opening fence
    lang: str  # normalised language ('' when the fence names none)
    code: str
    skip: str | None  # the reason given by a doc-test: skip marker
    requires: tuple = ()  # the modules named by a doc-test: requires marker

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def doc_files() -> list[Path]:
    return [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))


def parse(path: Path) -> list[Block]:
    blocks: list[Block] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        m = re.match(r"^(\s*)(`{3,})(.*)$", lines[i])
        if not m:
            i += 1
            continue
        indent, fence, info = m.group(1), m.group(2), m.group(3).strip()
        lang = info.split()[0].lower() if info else ""
        lang = ALIASES.get(lang, lang)
        skip = None
        requires: tuple = ()
        if i > 0:
            s = SKIP_RE.match(lines[i - 1].strip())
            if s:
                skip = s.group(1)
            r = REQUIRES_RE.match(lines[i - 1].strip())
            if r:
                requires = tuple(m.strip() for m in r.group(1).split(",") if m.strip())
        body: list[str] = []
        j = i + 1
        while j < len(lines) and not re.match(rf"^\s*{fence}\s*$", lines[j]):
            line = lines[j]
            body.append(line[len(indent):] if line.startswith(indent) else line)
            j += 1
        blocks.append(Block(path, i + 1, lang, "\n".join(body) + "\n", skip, requires))
        i = j + 1
    return blocks


def all_blocks() -> list[Block]:
    return [b for f in doc_files() for b in parse(f)]


def check_fences() -> int:
    bad = [b for b in all_blocks() if b.lang not in KNOWN]
    for b in bad:
        what = f"language '{b.lang}'" if b.lang else "no language"
        print(f"{b.where}: fence with {what}; name one of {sorted(KNOWN)}")
    print(f"doc_blocks fences: {len(all_blocks()) - len(bad)} ok, {len(bad)} bad")
    return 1 if bad else 0


def run(cmd: list[str], cwd: Path, env: dict | None = None, timeout: int = 600):
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


def pkg_config_flags(prefix: Path) -> list[str]:
    pcs = list(prefix.glob("**/pkgconfig/smax.pc"))
    if not pcs:
        raise SystemExit(f"doc_blocks: no smax.pc under {prefix}")
    env = dict(os.environ, PKG_CONFIG_PATH=str(pcs[0].parent))
    out = subprocess.run(["pkg-config", "--cflags", "--libs", "--static", "smax"],
                         env=env, capture_output=True, text=True, check=True)
    return out.stdout.split()


def wrap(block: Block) -> str:
    prelude = PRELUDE_C if block.lang == "c" else PRELUDE_CPP
    if re.search(r"\bint\s+main\s*\(", block.code):
        return prelude + block.code
    body = "".join("  " + line + "\n" for line in block.code.splitlines())
    head = "int main(void) {\n" if block.lang == "c" else "int main() {\n"
    return prelude + head + body + "  return 0;\n}\n"


def compile_blocks(args) -> int:
    prefix = Path(args.prefix).resolve()
    flags = pkg_config_flags(prefix)
    work = Path(args.work or tempfile.mkdtemp(prefix="smax-doc-blocks-"))
    work.mkdir(parents=True, exist_ok=True)
    failures = checked = 0
    for n, b in enumerate(all_blocks()):
        if b.lang not in ("c", "cpp", "cmake") or b.skip:
            continue
        checked += 1
        d = work / f"block{n}"
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir()
        if b.lang == "cmake":
            (d / "main.cc").write_text(PRELUDE_CPP + "int main() { return 0; }\n")
            (d / "CMakeLists.txt").write_text(
                "cmake_minimum_required(VERSION 3.20)\nproject(doc_block C CXX)\n"
                "add_executable(app main.cc)\n" + b.code)
            steps = [["cmake", "-S", ".", "-B", "b", f"-DCMAKE_PREFIX_PATH={prefix}",
                      f"-DCMAKE_CXX_COMPILER={args.cxx}", f"-DCMAKE_C_COMPILER={args.cc}"],
                     ["cmake", "--build", "b"], ["b/app"]]
        else:
            src = d / ("block.c" if b.lang == "c" else "block.cc")
            src.write_text(wrap(b))
            if b.lang == "c":
                cc = [args.cc, "-std=c99", "-Wall", "-Werror=implicit-function-declaration"]
            else:
                cc = [args.cxx, "-std=c++17", "-Wall"]
            steps = [cc + [str(src), "-o", "prog"] + flags, ["./prog"]]
        # A shared libsmax is found in the prefix (the static one needs nothing).
        libdirs = sorted({str(p.parent) for p in prefix.glob("**/libsmax.so*")})
        env = dict(os.environ)
        if libdirs:
            env["LD_LIBRARY_PATH"] = ":".join(libdirs + [env.get("LD_LIBRARY_PATH", "")])
        for step in steps:
            r = run(step, d, env=env)
            if r.returncode != 0:
                failures += 1
                print(f"FAIL {b.where} ({b.lang}): {' '.join(step)}\n{r.stdout}{r.stderr}")
                break
        else:
            print(f"ok   {b.where} ({b.lang})")
    print(f"doc_blocks compile: {checked - failures} passed, {failures} failed")
    return 1 if failures else 0


def shell_blocks(args) -> int:
    build = Path(args.build_dir).resolve()
    work = Path(args.work or tempfile.mkdtemp(prefix="smax-doc-shell-"))
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    # The repository's top-level entries, read-only in spirit, and build/.
    for entry in ROOT.iterdir():
        if entry.name in (".git", "build") or entry.name.startswith("build"):
            continue
        (work / entry.name).symlink_to(entry)
    (work / "build").symlink_to(build)
    failures = checked = 0
    for b in all_blocks():
        if b.lang != "sh" or b.skip:
            continue
        absent = [m for m in b.requires if importlib.util.find_spec(m) is None]
        if absent:
            print(f"skip {b.where} (sh): requires {', '.join(absent)}, not installed")
            continue
        checked += 1
        try:
            r = run(["bash", "-euo", "pipefail", "-c", b.code], work,
                    env=dict(os.environ, OMP_WAIT_POLICY="PASSIVE"), timeout=args.timeout)
            ok = r.returncode == 0
            out = r.stdout + r.stderr
        except subprocess.TimeoutExpired:
            ok, out = False, f"timed out after {args.timeout} s"
        if ok:
            print(f"ok   {b.where} (sh)")
        else:
            failures += 1
            print(f"FAIL {b.where} (sh):\n{b.code}--- output ---\n{out[-4000:]}")
    print(f"doc_blocks shell: {checked - failures} passed, {failures} failed")
    return 1 if failures else 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("fences")
    c = sub.add_parser("compile")
    c.add_argument("--prefix", required=True)
    c.add_argument("--cc", default="gcc")
    c.add_argument("--cxx", default="g++")
    c.add_argument("--work")
    s = sub.add_parser("shell")
    s.add_argument("--build-dir", required=True)
    s.add_argument("--work")
    s.add_argument("--timeout", type=int, default=300)
    li = sub.add_parser("list")
    li.add_argument("--lang")
    args = p.parse_args()
    if args.cmd == "fences":
        return check_fences()
    if args.cmd == "compile":
        return compile_blocks(args)
    if args.cmd == "shell":
        return shell_blocks(args)
    for b in all_blocks():
        if args.lang is None or b.lang == args.lang:
            print(f"{b.where} {b.lang or '-'}{' skip: ' + b.skip if b.skip else ''}"
                  f"{' requires: ' + ', '.join(b.requires) if b.requires else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
