"""The tree's size rules: no file over 500 lines in src/ or kokoro_lstm/, no C function
over 80 lines in src/ (the CUDA kernels, .cu, and the ISA kernels of src/kernels
excepted; vendored and generated files are not ours)."""
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAX_FILE, MAX_FUNCTION = 500, 80
NOT_OURS = (os.path.join("src", "third_party"), os.path.join("src", "cuda", "gen"))
KERNELS = (os.path.join("src", "kernels"),)


def _files(top, exts):
    for dirpath, dirnames, files in os.walk(os.path.join(ROOT, top)):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        for f in files:
            path = os.path.relpath(os.path.join(dirpath, f), ROOT)
            if f.endswith(exts) and not path.startswith(NOT_OURS):
                yield path


def _c_functions(text):
    """(name, line of its opening brace, line count from there) of each top-level
    brace block that follows a function head ("name(...)" before the "{")."""
    out, depth, start, head = [], 0, 0, ""
    for i, line in enumerate(text.splitlines(), 1):
        code = re.sub(r'"(?:[^"\\]|\\.)*"|//.*', "", line)
        if depth == 0 and "{" in code:
            head = (head + " " + code.split("{")[0]).strip()
            start = i
        elif depth == 0:
            head = code.strip() if code.strip() else ""
        depth += code.count("{") - code.count("}")
        if depth == 0 and start and "}" in code:
            m = re.search(r"(\w+)\s*\([^;]*\)\s*$", head)
            if m and not head.startswith(("struct", "typedef", "enum", "union")) and "=" not in head:
                out.append((m.group(1), start, i - start + 1))
            start, head = 0, ""
    return out


def test_files_are_short():
    long = [f"{p} ({n})" for p in _files("src", (".c", ".h", ".cu", ".cuh", ".def", ".inc"))
            for n in [sum(1 for _ in open(os.path.join(ROOT, p), encoding="utf-8"))] if n > MAX_FILE]
    long += [f"{p} ({n})" for p in _files("kokoro_lstm", (".py", ".c"))
             for n in [sum(1 for _ in open(os.path.join(ROOT, p), encoding="utf-8"))] if n > MAX_FILE]
    assert not long, f"files over {MAX_FILE} lines: {long}"


def test_c_functions_are_short():
    long = []
    for p in _files("src", (".c",)):
        if p.startswith(KERNELS):
            continue
        for name, line, n in _c_functions(open(os.path.join(ROOT, p), encoding="utf-8").read()):
            if n > MAX_FUNCTION:
                long.append(f"{p}:{line} {name} ({n})")
    assert not long, f"C functions over {MAX_FUNCTION} lines: {long}"


def test_the_c_scan_finds_functions():
    text = "static int f(int a,\n    int b) {\n  if (a) {\n    return b;\n  }\n  return a;\n}\n" \
           "struct s { int x; };\nint g(void) { return 1; }\n"
    assert _c_functions(text) == [("f", 2, 6), ("g", 9, 1)]
