#!/usr/bin/env python3
"""The retrieval evaluation over the Python standard library (README "Retrieval quality").

    python3 scripts/stdlib_eval.py corpus DIR    copy the corpus modules into DIR as a git repository
    python3 scripts/stdlib_eval.py queries FILE  write the query set (JSON lines) for this Python

Targets are named by symbol (or by a string the target definition contains) and resolved to
line ranges with `ast` against the running interpreter's standard library, so the set follows
the Python version instead of hard-coding its line numbers. Every query must resolve, or the
script stops naming the one that did not.
"""

import ast
import json
import pathlib
import shutil
import subprocess
import sys
import sysconfig

STDLIB = pathlib.Path(sysconfig.get_paths()["stdlib"])

# About 4 MB of the standard library: networking, files and archives, text, data structures,
# configuration and logging.
CORPUS = [
    "argparse.py", "base64.py", "bisect.py", "calendar.py", "configparser.py", "contextlib.py",
    "copy.py", "csv.py", "dataclasses.py", "datetime.py", "difflib.py", "fnmatch.py",
    "fractions.py", "functools.py", "getopt.py", "glob.py", "gzip.py", "heapq.py", "hmac.py",
    "ipaddress.py", "mimetypes.py", "netrc.py", "pathlib.py", "posixpath.py", "pprint.py",
    "queue.py", "random.py", "sched.py", "secrets.py", "selectors.py", "shlex.py", "shutil.py",
    "smtplib.py", "socket.py", "statistics.py", "string.py", "subprocess.py", "tarfile.py",
    "tempfile.py", "textwrap.py", "threading.py", "uuid.py", "warnings.py", "zipfile.py",
    "collections", "http", "json", "logging", "urllib", "tomllib", "re",
]

# (id, kind, query, file, target): target is ("symbol", "Class.method") or ("contains", text),
# the innermost definitions whose source contains the text.
QUERIES = [
    # natural language: what a developer asks, without the code's identifiers
    ("n01", "natural", "parse a date and time from an ISO 8601 string", "datetime.py", ("symbol", "datetime.fromisoformat")),
    ("n02", "natural", "follow HTTP redirects to the new location", "urllib/request.py", ("symbol", "HTTPRedirectHandler.redirect_request")),
    ("n03", "natural", "copy a directory tree recursively", "shutil.py", ("symbol", "copytree")),
    ("n04", "natural", "create a temporary directory that is removed afterwards", "tempfile.py", ("symbol", "TemporaryDirectory")),
    ("n05", "natural", "wrap long text to a fixed line width", "textwrap.py", ("symbol", "TextWrapper._wrap_chunks")),
    ("n06", "natural", "cache the results of a function call with least recently used eviction", "functools.py", ("symbol", "lru_cache")),
    ("n07", "natural", "run a command in a child process and capture its output", "subprocess.py", ("symbol", "run")),
    ("n08", "natural", "read rows from a comma separated values file as dictionaries", "csv.py", ("symbol", "DictReader")),
    ("n09", "natural", "serialize Python objects to a JSON string", "json/encoder.py", ("symbol", "JSONEncoder.encode")),
    ("n10", "natural", "rotate log files when they reach a size limit", "logging/handlers.py", ("symbol", "RotatingFileHandler")),
    ("n11", "natural", "compute the differences between two sequences of lines", "difflib.py", ("symbol", "unified_diff")),
    ("n12", "natural", "shuffle a list in place randomly", "random.py", ("symbol", "Random.shuffle")),
    ("n13", "natural", "split a shell command line into arguments respecting quotes", "shlex.py", ("symbol", "split")),
    ("n14", "natural", "find all path names matching a wildcard pattern", "glob.py", ("symbol", "glob")),
    ("n15", "natural", "send an email message through an SMTP server", "smtplib.py", ("symbol", "SMTP.send_message")),
    ("n16", "natural", "extract all members of a tar archive to a directory", "tarfile.py", ("symbol", "TarFile.extractall")),
    ("n17", "natural", "check whether an IP address belongs to a network", "ipaddress.py", ("symbol", "_BaseNetwork.__contains__")),
    ("n18", "natural", "generate a random universally unique identifier", "uuid.py", ("symbol", "uuid4")),
    ("n19", "natural", "compute the median of a list of numbers", "statistics.py", ("symbol", "median")),
    ("n20", "natural", "keep a heap ordered when pushing a new item", "heapq.py", ("symbol", "heappush")),
    ("n21", "natural", "guess the content type of a file from its name", "mimetypes.py", ("symbol", "MimeTypes.guess_type")),
    ("n22", "natural", "parse the cookies sent in an HTTP header", "http/cookies.py", ("symbol", "BaseCookie.__parse_string")),
    ("n23", "natural", "pretty print a nested data structure", "pprint.py", ("symbol", "PrettyPrinter.pformat")),
    ("n24", "natural", "wait until a thread finishes", "threading.py", ("symbol", "Thread.join")),
    # symbols and qualified names, as typed by someone who knows the name
    ("s01", "symbol", "parse_args", "argparse.py", ("symbol", "ArgumentParser.parse_args")),
    ("s02", "symbol", "HTTPConnection.request", "http/client.py", ("symbol", "HTTPConnection.request")),
    ("s03", "symbol", "OrderedDict.move_to_end", "collections/__init__.py", ("symbol", "OrderedDict.move_to_end")),
    ("s04", "symbol", "urlparse", "urllib/parse.py", ("symbol", "urlparse")),
    ("s05", "symbol", "JSONDecoder.raw_decode", "json/decoder.py", ("symbol", "JSONDecoder.raw_decode")),
    ("s06", "symbol", "ZipFile.extractall", "zipfile.py", ("symbol", "ZipFile.extractall")),
    ("s07", "symbol", "getLogger", "logging/__init__.py", ("symbol", "getLogger")),
    ("s08", "symbol", "Path.glob", "pathlib.py", ("symbol", "Path.glob")),
    ("s09", "symbol", "namedtuple", "collections/__init__.py", ("symbol", "namedtuple")),
    ("s10", "symbol", "dataclass", "dataclasses.py", ("symbol", "dataclass")),
    ("s11", "symbol", "Fraction.limit_denominator", "fractions.py", ("symbol", "Fraction.limit_denominator")),
    ("s12", "symbol", "ThreadingHTTPServer", "http/server.py", ("symbol", "ThreadingHTTPServer")),
    ("s13", "symbol", "contextmanager", "contextlib.py", ("symbol", "contextmanager")),
    ("s14", "symbol", "deepcopy", "copy.py", ("symbol", "deepcopy")),
    ("s15", "symbol", "quote_plus", "urllib/parse.py", ("symbol", "quote_plus")),
    ("s16", "symbol", "Counter.most_common", "collections/__init__.py", ("symbol", "Counter.most_common")),
    # error messages, pasted from a traceback
    ("e01", "error", "ValueError: Invalid isoformat string: '2021-13-45'", "datetime.py", ("contains", "Invalid isoformat string: {date_string!r}")),
    ("e02", "error", "json.decoder.JSONDecodeError: Expecting value: line 1 column 1 (char 0)", "json/decoder.py", ("symbol", "JSONDecoder.raw_decode")),
    ("e03", "error", "zipfile.BadZipFile: File is not a zip file", "zipfile.py", ("contains", "File is not a zip file")),
    ("e04", "error", "gzip.BadGzipFile: Not a gzipped file (b'PK')", "gzip.py", ("contains", "Not a gzipped file")),
    ("e05", "error", "configparser.NoSectionError: No section: 'database'", "configparser.py", ("symbol", "NoSectionError")),
    ("e06", "error", "urllib.error.URLError: <urlopen error no host given>", "urllib/request.py", ("contains", "URLError('no host given')")),
    ("e07", "error", "ValueError: unknown url type: 'example.com/path'", "urllib/request.py", ("contains", "unknown url type")),
    ("e08", "error", "http.client.RemoteDisconnected: Remote end closed connection without response", "http/client.py", ("contains", "Remote end closed connection without")),
    ("e09", "error", "argparse: error: the following arguments are required: path", "argparse.py", ("contains", "the following arguments are required")),
    ("e10", "error", "re.error: bad escape \\q at position 0", "re/_parser.py", ("contains", "'bad escape %s' % escape")),
    ("e11", "error", "tomllib.TOMLDecodeError: Invalid value", "tomllib/_parser.py", ("symbol", "parse_value")),
    ("e12", "error", "shutil.Error: Destination path already exists", "shutil.py", ("contains", "already exists")),
    # configuration: environment variables, settings and options
    ("c01", "config", "TMPDIR environment variable for temporary files", "tempfile.py", ("symbol", "_candidate_tempdir_list")),
    ("c02", "config", "http_proxy https_proxy environment variables", "urllib/request.py", ("symbol", "getproxies_environment")),
    ("c03", "config", "no_proxy hosts that bypass the proxy", "urllib/request.py", ("symbol", "proxy_bypass_environment")),
    ("c04", "config", "COLUMNS and LINES environment variables terminal size", "shutil.py", ("symbol", "get_terminal_size")),
    ("c05", "config", "HOME environment variable expand the user directory", "posixpath.py", ("symbol", "expanduser")),
    ("c06", "config", "logging dictConfig disable_existing_loggers", "logging/config.py", ("symbol", "DictConfigurator.configure")),
    ("c07", "config", "argparse fromfile_prefix_chars read arguments from a file", "argparse.py", ("symbol", "ArgumentParser._read_args_from_files")),
    ("c08", "config", "configparser interpolation of %(name)s values", "configparser.py", ("symbol", "BasicInterpolation")),
    ("c09", "config", "logging basicConfig format datefmt level filename", "logging/__init__.py", ("symbol", "basicConfig")),
    ("c10", "config", "netrc file machine login password", "netrc.py", ("symbol", "netrc._parse")),
    ("c11", "config", "warnings filter action ignore error default", "warnings.py", ("symbol", "filterwarnings")),
]


def definitions(tree):
    """(qualified name, node) of every function and class, outermost first."""
    out = []

    def walk(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                out.append((name, child))
                walk(child, name + ".")
            elif not isinstance(child, (ast.Lambda,)):
                walk(child, prefix)

    walk(tree, "")
    return out


def span(node):
    """Lines of a definition, its decorators included."""
    start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
    return start, node.end_lineno


def resolve(rel, target):
    source = (STDLIB / rel).read_text(encoding="utf-8")
    tree = ast.parse(source)
    defs = definitions(tree)
    how, what = target
    if how == "symbol":
        found = [span(n) for name, n in defs if name == what]
        if not found:
            sys.exit(f"{rel}: no definition {what}")
        return found[:1]
    lines = source.splitlines()
    hits = [i + 1 for i, line in enumerate(lines) if what in line]
    if not hits:
        sys.exit(f"{rel}: no line contains {what!r}")
    spans = []
    for line in hits:
        inner = [span(n) for _, n in defs if span(n)[0] <= line <= span(n)[1]]
        if inner:
            best = min(inner, key=lambda s: s[1] - s[0])
            if best not in spans:
                spans.append(best)
    if not spans:
        sys.exit(f"{rel}: {what!r} is not inside a definition")
    return spans


def queries(out):
    with open(out, "w", encoding="utf-8") as f:
        for qid, kind, query, rel, target in QUERIES:
            targets = [
                {"repo": "*", "path": rel, "start_line": a, "end_line": b}
                for a, b in resolve(rel, target)
            ]
            f.write(json.dumps({"id": qid, "query": query, "kind": kind, "targets": targets}) + "\n")
    print(f"{len(QUERIES)} queries for Python {sys.version.split()[0]} written to {out}")


def corpus(dest):
    dest = pathlib.Path(dest)
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    for rel in CORPUS:
        src = STDLIB / rel
        if src.is_dir():
            shutil.copytree(src, dest / rel, ignore=shutil.ignore_patterns("__pycache__", "test*"))
        else:
            shutil.copy2(src, dest / rel)
    git = ["git", "-C", str(dest), "-c", "user.name=eval", "-c", "user.email=eval@example.com"]
    subprocess.run(git + ["init", "-q", "-b", "main"], check=True)
    subprocess.run(git + ["add", "-A"], check=True)
    subprocess.run(git + ["commit", "-q", "-m", f"Python {sys.version.split()[0]} stdlib subset"], check=True)
    size = sum(p.stat().st_size for p in dest.rglob("*.py"))
    print(f"corpus: {len(list(dest.rglob('*.py')))} files, {size / 1e6:.1f} MB in {dest}")


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("corpus", "queries"):
        sys.exit(__doc__)
    {"corpus": corpus, "queries": queries}[sys.argv[1]](sys.argv[2])
