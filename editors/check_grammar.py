#!/usr/bin/env python3
"""Keeps editors/envc.tmLanguage.json (and editors/vim) honest. Python 3 standard library only.

    python3 editors/check_grammar.py [--no-vim]

What it checks, in order:

1. The grammar is valid JSON: scopeName `source.envc`, only the rule keys the tokenizer
   below understands, every `include` resolves.
2. Every `match`/`begin`/`end` regex compiles with Python's `re`, after the Oniguruma→Python
   rewrites in `to_python_regex` (the grammar keeps to the common subset, so it reports how
   many needed one: it should be none), and, when libonig is installed, with Oniguruma
   itself (through ctypes, compiled as VS Code compiles them).
3. The lexer's vocabulary reaches the right scopes: every keyword of `TokenKind::keyword`
   (lang/src/token.rs: lang/src/lexer.rs only calls it), every size unit, escape and
   punctuation of lang/src/lexer.rs, and the node kinds, check kinds, library functions and
   type names of compiler/src, each parsed from the Rust source.
4. A small TextMate tokenizer (the vscode-textmate rules: earliest match wins, ties go to the
   region's end and then to pattern order; 3 to 5 run once per regex engine of 2) runs over
   every source the test suite compiles:
   std/*.env, examples/**/*.env and the ```env blocks of docs/*.md and README.md. None may
   get an `invalid` scope, and every region must be closed at the end of the file.
5. Snippets, many taken from the lexer's own tests, get the expected scope token by token.
6. With each of `vim` and `nvim` that is installed: editors/vim loads without errors,
   ftdetect chooses envc or not as documented, the real sources show no Error group and
   leave no region open, and the snippets of 5 (and the vocabulary of 3) get the expected
   Vim syntax groups.

Exits 1 on any failure, 0 otherwise.
"""

import ctypes
import ctypes.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GRAMMAR = os.path.join(ROOT, "editors", "envc.tmLanguage.json")
VIM_DIR = os.path.join(ROOT, "editors", "vim")

failures = []


def fail(msg):
    failures.append(msg)
    print("  FAIL " + msg)


def read(rel):
    with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
        return f.read()


# ---- 1, 2: structure and regexes ---------------------------------------------------------

RULE_KEYS = {
    "name", "contentName", "match", "begin", "end", "captures", "beginCaptures",
    "endCaptures", "patterns", "include", "comment",
}


def to_python_regex(src):
    """Oniguruma → Python `re`. Returns (pattern, list of rewrites applied)."""
    done = []
    out = src
    # Named groups: Oniguruma `(?<name>…)`, Python `(?P<name>…)`; not lookbehinds `(?<=`, `(?<!`.
    new = re.sub(r"\(\?<(?![=!])", "(?P<", out)
    if new != out:
        done.append("named group")
        out = new
    for onig, py in ((r"\h", "[0-9A-Fa-f]"), (r"\H", "[^0-9A-Fa-f]"), (r"\z", r"\Z")):
        # Only an unescaped backslash sequence, not `\\h`.
        new = re.sub(r"(?<!\\)((?:\\\\)*)" + re.escape(onig), lambda m: m.group(1) + py, out)
        if new != out:
            done.append(onig)
            out = new
    for unsupported in (r"\G", r"\p{", r"\g<", r"\k<", r"\K", "(?~"):
        if unsupported in out:
            raise re.error("Oniguruma-only construct %s has no Python equivalent" % unsupported)
    return out, done


class PythonEngine:
    name = "Python re"

    def __init__(self):
        self.rewrites = 0

    def compile(self, src):
        py, done = to_python_regex(src)
        self.rewrites += bool(done)
        return re.compile(py)


class OnigEngine:
    """Oniguruma itself, through ctypes, compiled as vscode-oniguruma compiles (UTF-8, the
    default Ruby syntax, ONIG_OPTION_CAPTURE_GROUP). Used only when libonig is installed."""

    CAPTURE_GROUP = 1 << 8

    class Region(ctypes.Structure):
        _fields_ = [("allocated", ctypes.c_int), ("num_regs", ctypes.c_int),
                    ("beg", ctypes.POINTER(ctypes.c_int)), ("end", ctypes.POINTER(ctypes.c_int)),
                    ("history_root", ctypes.c_void_p)]

    class ErrorInfo(ctypes.Structure):
        _fields_ = [("enc", ctypes.c_void_p), ("par", ctypes.c_char_p), ("par_end", ctypes.c_char_p)]

    @classmethod
    def load(cls):
        for name in (ctypes.util.find_library("onig"), "libonig.so.5", "libonig.dylib"):
            if not name:
                continue
            try:
                return cls(ctypes.CDLL(name))
            except OSError:
                continue
        return None

    def __init__(self, lib):
        self.lib = lib
        lib.onig_version.restype = ctypes.c_char_p
        self.name = "Oniguruma %s" % lib.onig_version().decode()
        self.utf8 = ctypes.c_void_p(ctypes.addressof(ctypes.c_char.in_dll(lib, "OnigEncodingUTF8")))
        self.syntax = ctypes.c_void_p.in_dll(lib, "OnigDefaultSyntax")
        encs = (ctypes.c_void_p * 1)(self.utf8)
        if lib.onig_initialize(encs, 1) != 0:
            raise OSError("onig_initialize failed")
        lib.onig_new.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_char_p, ctypes.c_char_p,
                                 ctypes.c_uint, ctypes.c_void_p, ctypes.c_void_p,
                                 ctypes.POINTER(self.ErrorInfo)]
        lib.onig_search.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                    ctypes.c_void_p, ctypes.c_void_p,
                                    ctypes.POINTER(self.Region), ctypes.c_uint]
        lib.onig_region_new.restype = ctypes.POINTER(self.Region)
        lib.onig_number_of_captures.argtypes = [ctypes.c_void_p]
        self.region = lib.onig_region_new()
        # The line last searched: (str, UTF-8 buffer, its length, char offset of each byte,
        # byte offset of each char). Oniguruma works in bytes, the tokenizer in characters.
        self.subject = None

    def compile(self, src):
        pattern = src.encode("utf-8")
        buf = ctypes.create_string_buffer(pattern, len(pattern))
        reg = ctypes.c_void_p()
        info = self.ErrorInfo()
        end = ctypes.c_char_p(ctypes.addressof(buf) + len(pattern))
        code = self.lib.onig_new(ctypes.byref(reg), ctypes.cast(buf, ctypes.c_char_p), end,
                                 self.CAPTURE_GROUP, self.utf8, self.syntax, ctypes.byref(info))
        if code != 0:
            msg = ctypes.create_string_buffer(256)
            self.lib.onig_error_code_to_str(msg, code, ctypes.byref(info))
            raise re.error(msg.value.decode("utf-8", "replace"))
        return OnigPattern(self, reg, self.lib.onig_number_of_captures(reg))

    def prepare(self, s):
        if self.subject is None or self.subject[0] is not s:
            data = s.encode("utf-8")
            char_at = [0] * (len(data) + 1)
            b = 0
            for i, ch in enumerate(s):
                n = len(ch.encode("utf-8"))
                for k in range(n):
                    char_at[b + k] = i
                b += n
            char_at[len(data)] = len(s)
            byte_at = [len(s[:i].encode("utf-8")) for i in range(len(s) + 1)]
            buf = ctypes.create_string_buffer(data, len(data) + 1)
            self.subject = (s, buf, len(data), char_at, byte_at)
        return self.subject


class OnigPattern:
    def __init__(self, engine, reg, groups):
        self.engine, self.reg, self.groups = engine, reg, groups

    def search(self, s, pos):
        e = self.engine
        _, buf, n, char_at, byte_at = e.prepare(s)
        base = ctypes.addressof(buf)
        r = e.lib.onig_search(self.reg, base, base + n, base + byte_at[pos], base + n, e.region, 0)
        if r < 0:
            return None
        reg = e.region.contents
        spans = [(reg.beg[g], reg.end[g]) for g in range(reg.num_regs)]
        return Match([(char_at[a], char_at[b]) if a >= 0 else (-1, -1) for a, b in spans], self.groups)


class Match:
    """The part of re.Match the tokenizer uses, for both engines."""

    def __init__(self, spans, groups):
        self.spans, self.groups = spans, groups

    @classmethod
    def of(cls, m):
        return cls([m.span(g) for g in range(m.re.groups + 1)], m.re.groups) if m else None

    def start(self, g=0):
        return self.spans[g][0] if g < len(self.spans) else -1

    def end(self, g=0):
        return self.spans[g][1] if g < len(self.spans) else -1


class Grammar:
    def __init__(self, data, engine):
        self.data = data
        self.repo = data.get("repository", {})
        self.engine = engine
        self.regex_cache = {}
        self.flat_cache = {}

    def regex(self, src):
        if src not in self.regex_cache:
            self.regex_cache[src] = self.engine.compile(src)
        return self.regex_cache[src]

    def search(self, src, s, pos):
        m = self.regex(src).search(s, pos)
        return m if isinstance(m, Match) or m is None else Match.of(m)

    def resolve(self, ref):
        if ref in ("$self", "$base"):
            return self.data
        if ref.startswith("#") and ref[1:] in self.repo:
            return self.repo[ref[1:]]
        raise KeyError(ref)

    def flatten(self, patterns, path=()):
        """The concrete match/begin rules of a pattern list (a list inside the grammar, so its
        id is stable), includes expanded, in order."""
        key = id(patterns)
        if key in self.flat_cache:
            return self.flat_cache[key]
        out = []
        for rule in patterns:
            if "include" in rule:
                rule = self.resolve(rule["include"])
            if "match" in rule or "begin" in rule:
                out.append(rule)
            elif id(rule) not in path:  # a container including itself adds nothing new
                out.extend(self.flatten(rule.get("patterns", []), path + (id(rule),)))
        if not path:
            self.flat_cache[key] = out
        return out

    def tokenize(self, text):
        """Per line, one tuple of scopes per character (the line's `\\n` included), and the
        depth of the region stack at the end (1 when every region closed)."""
        root = {"patterns": self.data["patterns"]}
        top = [self.data["scopeName"]]
        stack = [(root, None, top, top)]  # (rule, end pattern, scopes, content scopes)
        lines = []
        for line in text.split("\n"):
            s = line + "\n"  # vscode-textmate also feeds each line with its newline
            scopes = [None] * len(s)
            pos = 0
            steps = 0
            while pos < len(s):
                steps += 1
                if steps > 20 * len(s) + 100:
                    raise RuntimeError("no progress tokenizing %r" % line)
                rule, end, outer, inner = stack[-1]
                best = None
                if end is not None:
                    m = self.search(end, s, pos)
                    if m:
                        best = (m.start(), m, None)
                for r in self.flatten(rule.get("patterns", [])):
                    m = self.search(r.get("match", r.get("begin")), s, pos)
                    if m and (best is None or m.start() < best[0]):
                        best = (m.start(), m, r)
                if best is None:
                    fill(scopes, pos, len(s), inner)
                    break
                start, m, r = best
                fill(scopes, pos, start, inner)
                if r is None:  # the region's end
                    paint(scopes, m, outer, rule.get("endCaptures", rule.get("captures")))
                    stack.pop()
                    pos = m.end()
                elif "match" in r:
                    base = outer_plus(inner, r.get("name"))
                    paint(scopes, m, base, r.get("captures"))
                    if m.end() == m.start():
                        fill(scopes, pos, pos + 1, inner)
                        pos += 1
                    else:
                        pos = m.end()
                else:
                    base = outer_plus(inner, r.get("name"))
                    paint(scopes, m, base, r.get("beginCaptures", r.get("captures")))
                    stack.append((r, r["end"], base, outer_plus(base, r.get("contentName"))))
                    pos = m.end()
            lines.append(scopes)
        return lines, len(stack)


def outer_plus(scopes, name):
    return scopes + name.split() if name else scopes


def fill(scopes, a, b, value):
    for i in range(a, b):
        scopes[i] = tuple(value)


def paint(scopes, m, base, captures):
    captures = captures or {}
    for i in range(m.start(), m.end()):
        names = list(base)
        for g in sorted(captures, key=int):
            gi = int(g)
            if gi <= m.groups and m.start(gi) != -1 and m.start(gi) <= i < m.end(gi):
                names += captures[g].get("name", "").split()
        scopes[i] = tuple(names)


def has_scope(scopes, prefix):
    return any(s == prefix or s.startswith(prefix + ".") for s in scopes)


def check_structure(data):
    print("1. grammar structure")
    if data.get("scopeName") != "source.envc":
        fail("scopeName is %r, not 'source.envc'" % data.get("scopeName"))
    g = Grammar(data, PythonEngine())
    count = 0

    def walk(rule, where):
        nonlocal count
        count += 1
        unknown = set(rule) - RULE_KEYS - ({"$schema", "scopeName", "fileTypes", "repository"} if rule is data else set())
        if unknown:
            fail("%s: keys the tokenizer does not implement: %s" % (where, sorted(unknown)))
        if "include" in rule:
            try:
                g.resolve(rule["include"])
            except KeyError:
                fail("%s: include %s does not resolve" % (where, rule["include"]))
        if ("begin" in rule) != ("end" in rule):
            fail("%s: begin without end, or end without begin" % where)
        if "match" in rule and "begin" in rule:
            fail("%s: both match and begin" % where)
        for i, sub in enumerate(rule.get("patterns", [])):
            walk(sub, "%s/patterns[%d]" % (where, i))

    walk(data, "root")
    for name, rule in data.get("repository", {}).items():
        walk(rule, "#" + name)
    print("   %d rules, %d repository entries, includes resolved" % (count, len(data.get("repository", {}))))
    return g


def all_regexes(data):
    stack = [("root", data)] + [("#" + k, v) for k, v in data.get("repository", {}).items()]
    while stack:
        where, rule = stack.pop()
        for key in ("match", "begin", "end"):
            if key in rule:
                yield where, key, rule[key]
        stack.extend(("%s/patterns[%d]" % (where, i), r) for i, r in enumerate(rule.get("patterns", [])))


def check_regexes(grammars):
    print("2. regexes compile")
    for g in grammars:
        n = 0
        for where, key, src in all_regexes(g.data):
            n += 1
            try:
                g.regex(src)
            except re.error as e:
                fail("%s: %s %s %r: %s" % (g.engine.name, where, key, src, e))
        note = ""
        if isinstance(g.engine, PythonEngine):
            note = "; %d needed an Oniguruma→Python rewrite" % g.engine.rewrites
            if g.engine.rewrites:
                fail("%d regexes are outside the Oniguruma/Python common subset" % g.engine.rewrites)
        print("   %s: %d regexes%s" % (g.engine.name, n, note))


# ---- 3: the lexer's vocabulary -------------------------------------------------------------

def rust_vocabulary():
    token = read("lang/src/token.rs")
    lexer = read("lang/src/lexer.rs")
    types = read("compiler/src/types.rs")
    node_kinds = read("ids/src/node.rs")
    builtins = read("compiler/src/builtins.rs")

    def block(src, start, end="\n}"):
        i = src.index(start)
        return src[i:src.index(end, i)]

    vocab = {}
    vocab["keywords"] = re.findall(r'"(\w+)" => \w+,', block(token, "pub fn keyword("))
    vocab["size units"] = re.findall(r'\("(\w+)",', block(lexer, "pub const SIZE_UNITS", "];"))
    escape_line = next(l for l in lexer.splitlines() if "Some('n'" in l)
    vocab["escapes"] = [c.replace("\\\\", "\\") for c in re.findall(r"'(\\\\|[^'])'", escape_line)]
    punct = block(lexer, "fn punct(")
    vocab["punctuation"] = re.findall(r'tag\("([^"]+)"\)', punct) + re.findall(r"char\('(.)'\)", punct)
    vocab["node kinds"] = re.findall(r'NodeKind::\w+ => "(\w+)"', node_kinds)
    vocab["check kinds"] = re.findall(r'CheckKind::\w+ => "(\w+)"', types)
    vocab["library functions"] = re.findall(r'\("(\w+)", Builtin::\w+\)', block(builtins, "pub const FUNCTIONS", "];"))
    vocab["type names"] = re.findall(r'"(\w+)"', block(types, "pub const BUILTIN_TYPE_NAMES", "];"))
    for what, items in vocab.items():
        if not items:
            fail("found no %s in the Rust sources: has the code moved?" % what)
    return vocab


def scopes_of(g, text, needle, nth=0):
    """Scopes of each character of the nth occurrence of needle in text."""
    lines, _ = g.tokenize(text)
    at = -1
    for _ in range(nth + 1):
        at = text.index(needle, at + 1)
    line = text.count("\n", 0, at)
    col = at - (text.rfind("\n", 0, at) + 1)
    return [lines[line][col + i] for i in range(len(needle))], (line, col)


def check_vocabulary(g, vocab):
    print("3. the lexer's vocabulary in the grammar")
    text = json.dumps(g.data)
    probes = []
    for kw in vocab["keywords"]:
        if not re.search(r"(?<![A-Za-z0-9_])%s(?![A-Za-z0-9_])" % kw, text):
            fail("keyword %r does not appear in the grammar" % kw)
        scope = "constant.language" if kw in ("true", "false") else ("keyword", "storage")
        probes.append((kw, kw, scope))
    for unit in vocab["size units"]:
        probes.append(("let x = 3%s" % unit, "3" + unit, "constant.numeric.size"))
    for c in vocab["escapes"]:
        probes.append(('"a\\%sb"' % c, "\\" + c, "constant.character.escape"))
    for p in vocab["punctuation"]:
        probes.append(("a %s b" % p, p, None))
    for k in vocab["node kinds"]:
        probes.append(("let n = %s(name = \"x\")" % k, k, "support.class.node"))
        probes.append(("fn f(x: %s) => x" % k, k, "support.type.node"))
    for k in vocab["check kinds"]:
        probes.append(("let c = %s(\"x\")" % k, k, "support.function.check"))
    for f in vocab["library functions"]:
        probes.append(("let v = %s(x)" % f, f, "support.function.builtin"))
    for t in vocab["type names"]:
        expected = "support.type.node" if t in vocab["node kinds"] else "support.type.builtin"
        probes.append(("let v: %s = x" % t, t, expected))
    for src, needle, expected in probes:
        chars, _ = scopes_of(g, src, needle)
        if any(has_scope(s, "invalid") for s in chars):
            fail("%r in %r is scoped invalid" % (needle, src))
        if expected is None:
            continue
        wanted = expected if isinstance(expected, tuple) else (expected,)
        if not all(any(has_scope(s, w) for w in wanted) for s in chars):
            fail("%r in %r: expected %s, got %s" % (needle, src, " or ".join(wanted), chars[0]))
    print("   " + ", ".join("%d %s" % (len(v), k) for k, v in vocab.items()))
    print("   %d probes tokenized" % len(probes))


# ---- 4: every source the test suite compiles ---------------------------------------------

def valid_sources():
    out = []
    for base in ("std", "examples"):
        for dirpath, _, files in os.walk(os.path.join(ROOT, base)):
            for f in sorted(files):
                if f.endswith(".env"):
                    p = os.path.join(dirpath, f)
                    out.append((os.path.relpath(p, ROOT), open(p, encoding="utf-8").read()))
    docs = [os.path.join("docs", f) for f in sorted(os.listdir(os.path.join(ROOT, "docs"))) if f.endswith(".md")]
    for rel in docs + ["README.md"]:
        text = read(rel)
        for i, m in enumerate(re.finditer(r"^```env\n(.*?)^```", text, re.S | re.M)):
            line = text.count("\n", 0, m.start()) + 2
            out.append(("%s:%d (block %d)" % (rel, line, i + 1), m.group(1)))
    return out


def check_sources(g, sources):
    print("4. every valid source tokenizes cleanly")
    for name, text in sources:
        lines, depth = g.tokenize(text)
        if depth != 1:
            fail("%s: %d region(s) still open at the end" % (name, depth - 1))
        for ln, scopes in enumerate(lines):
            for col, s in enumerate(scopes):
                if s and has_scope(s, "invalid"):
                    fail("%s:%d:%d: %r scoped %s" % (name, ln + 1, col + 1, text.split("\n")[ln][col:col + 10], s[-1]))
                    break
    print("   %d sources (%d lines)" % (len(sources), sum(t.count("\n") + 1 for _, t in sources)))


# ---- 5: snippets ---------------------------------------------------------------------------

# (source, needle, occurrence, TextMate scope prefix, Vim syntax group), checked at every
# character of the needle. A scope prefix must be in the scope stack; one starting with `!`
# must not be. A Vim group must be in the syntax stack (synstack()); "" means the character
# has no group of its own (none, or only a region that colours nothing, such as `${…}`'s
# inside); None skips Vim.
EXPECT = [
    # lang/src/lexer.rs tests
    ("let x = 512MiB", "let", 0, "storage.type", "envcDecl"),
    ("let x = 512MiB", "x", 0, "variable.other.definition", "envcBindingName"),
    ("let x = 512MiB", "512MiB", 0, "constant.numeric.size", "envcSize"),
    ("let x = 512MiB", "MiB", 0, "keyword.other.unit", "envcSizeUnit"),
    ("let y = 0o644 + 1_000 + 0..=3", "0o644", 0, "constant.numeric.octal", "envcOctal"),
    ("let y = 0o644 + 1_000 + 0..=3", "1_000", 0, "constant.numeric.integer", "envcInt"),
    ("let y = 0o644 + 1_000 + 0..=3", "..=", 0, "keyword.operator.range", "envcOperator"),
    ("let y = 0o644 + 1_000 + 0..=3", "3", 0, "constant.numeric.integer", "envcInt"),
    ("let a = b # c\nlet d = e", "# c", 0, "comment.line.number-sign", "envcComment"),
    ("let a = b # c\nlet d = e", "d", 0, "!comment", "envcBindingName"),
    ("let z = 12px", "12px", 0, "invalid.illegal", "envcNumberError"),
    ("let z = 1__", "1__", 0, "constant.numeric.integer", "envcInt"),
    ("let z = 0o9", "0o9", 0, "invalid.illegal", "envcNumberError"),
    ("let z = 0x10", "0x10", 0, "invalid.illegal", "envcNumberError"),
    ("let z = x ≠ y", "≠", 0, "invalid.illegal", "envcError"),
    ("let z = x ≠ y", "y", 0, "!invalid", ""),
    ('let s = "a${ {k = "}"}.k }b"', "${", 0, "punctuation.section.interpolation.begin", "envcInterpDelim"),
    ('let s = "a${ {k = "}"}.k }b"', "k", 0, "variable.other.property", "envcFieldKey"),
    ('let s = "a${ {k = "}"}.k }b"', '"}"', 0, "string.quoted.double", None),
    ('let s = "a${ {k = "}"}.k }b"', "k", 1, "variable.other.property", "envcMember"),
    ('let s = "a${ {k = "}"}.k }b"', "}", 2, "punctuation.section.interpolation.end", "envcInterpDelim"),
    ('let s = "a${ {k = "}"}.k }b"', "b", 0, "string.quoted.double", "envcString"),
    ('let s = "open\nlet x = 1', "open", 0, "string.quoted.double", "envcString"),
    ('let s = "open\nlet x = 1', "let", 1, "storage.type", "envcDecl"),
    ('let s = "\\q"', "\\q", 0, "invalid.illegal", "envcEscapeError"),
    ('let s = "a\\\nlet x = 1', "\\", 0, "invalid.illegal", "envcEscapeError"),
    ('let s = """a\n"b"\n"""\nlet zz = 1', '"b"', 0, "string.quoted.triple", "envcStringTriple"),
    ('let s = """a\n"b"\n"""\nlet zz = 1', "zz", 0, "variable.other.definition", "envcBindingName"),
    ('let s = """a\\\nb"""', "\\", 0, "constant.character.escape", "envcEscapeNewline"),
    ('let s = "\\${x}"', "\\$", 0, "constant.character.escape", "envcEscape"),
    ('let s = "\\${x}"', "x", 0, "string.quoted.double", "envcString"),
    ('let s = "$x"', "$x", 0, "string.quoted.double", "envcString"),
    ('let s = "${ x # a comment }"\n}"', "# a comment }\"", 0, "comment.line", "envcComment"),
    # declarations, types, functions
    ("param memory: size(512MiB..=4GiB) = 1GiB", "memory", 0, "variable.other.constant.param", "envcParamName"),
    ("param memory: size(512MiB..=4GiB) = 1GiB", "size", 0, "support.type.builtin", "envcBuiltinType"),
    ("param memory: size(512MiB..=4GiB) = 1GiB", "4GiB", 0, "constant.numeric.size", "envcSize"),
    ("param memory: size(512MiB..=4GiB) = 1GiB", "1GiB", 0, "constant.numeric.size", "envcSize"),
    ("output total = memory * 2", "total", 0, "variable.other.definition", "envcOutputName"),
    ("type Port = int(1..=65535)", "type", 0, "storage.type", "envcTypedef"),
    ("type Port = int(1..=65535)", "Port", 0, "entity.name.type", "envcTypeDeclName"),
    ("type Port = int(1..=65535)", "int", 0, "support.type.builtin", "envcBuiltinType"),
    ("type D = {\n  name: str,\n  port: Port = 5432,\n  tags: list[str] = [],\n}", "name", 0, "variable.other.property", "envcFieldDecl"),
    ("type D = {\n  name: str,\n  port: Port = 5432,\n  tags: list[str] = [],\n}", "Port", 0, "entity.name.type", "envcTypeName"),
    ("type D = {\n  name: str,\n  port: Port = 5432,\n  tags: list[str] = [],\n}", "5432", 0, "constant.numeric.integer", "envcInt"),
    ("type D = {\n  name: str,\n  port: Port = 5432,\n  tags: list[str] = [],\n}", "list", 0, "support.type.builtin", "envcBuiltinType"),
    ("type D = {\n  name: str,\n  port: Port = 5432,\n  tags: list[str] = [],\n}", "str", 1, "support.type.builtin", "envcBuiltinType"),
    ("let m: db.Config = x", "db", 0, "entity.name.namespace", "envcTypeModule"),
    ("let m: db.Config = x", "Config", 0, "entity.name.type", "envcTypeName"),
    ('fn url(host: str, port: int = 443) -> str { "${host}:${port}" }', "fn", 0, "storage.type.function", "envcFn"),
    ('fn url(host: str, port: int = 443) -> str { "${host}:${port}" }', "url", 0, "entity.name.function", "envcFuncName"),
    ('fn url(host: str, port: int = 443) -> str { "${host}:${port}" }', "host", 0, "variable.parameter", "envcParameter"),
    ('fn url(host: str, port: int = 443) -> str { "${host}:${port}" }', "port", 0, "variable.parameter", "envcParameter"),
    ('fn url(host: str, port: int = 443) -> str { "${host}:${port}" }', "str", 1, "support.type.builtin", "envcBuiltinType"),
    ('fn url(host: str, port: int = 443) -> str { "${host}:${port}" }', "host", 1, "meta.embedded", ""),
    ("fn unit(t: target) -> { file: file, service: service } { f }", "file", 0, "variable.other.property", "envcFieldDecl"),
    ("fn unit(t: target) -> { file: file, service: service } { f }", "file", 1, "support.type.node", "envcNodeType"),
    ("fn unit(t: target) -> { file: file, service: service } { f }", "target", 0, "support.type.builtin", "envcBuiltinType"),
    ("let inc = fn(x) => x + 1", "x", 0, "variable.parameter", "envcParameter"),
    ("let inc = fn(x) => x + 1", "=>", 0, "keyword.operator.arrow", "envcOperator"),
    # calls, records, members
    ('let v = vm(name = "web", image = base)', "vm", 0, "support.class.node", "envcNodeCall"),
    ('let v = vm(name = "web", image = base)', "name", 0, "variable.parameter", "envcNamedArg"),
    ('let v = vm(name = "web", image = base)', "image", 0, "variable.parameter", "envcNamedArg"),
    ('let v = vm(name = "web", image = base)', "image", 0, "!support", None),
    ("let e = [tcp(80), http(u, status = 200)]", "tcp", 0, "support.function.check", "envcCheckCall"),
    ("let e = [tcp(80), http(u, status = 200)]", "status", 0, "variable.parameter", "envcNamedArg"),
    ('let j = join(xs, ",")', "join", 0, "support.function.builtin", "envcBuiltinCall"),
    ('let m = debian.machine("db-0", memory = 2GiB)', "machine", 0, "entity.name.function", "envcFuncCall"),
    ('let m = debian.machine("db-0", memory = 2GiB)', "memory", 0, "variable.parameter", "envcNamedArg"),
    ("let f = lib.file(x)", "file", 0, "!support", "envcFuncCall"),
    ("let a = w.address", "address", 0, "variable.other.property", "envcMember"),
    ("let a = x.file", "file", 0, "variable.other.property", "envcMember"),
    ('let r = { name = "db", "max-connections" = 200 }', "name", 0, "variable.other.property", "envcFieldKey"),
    ('let r = { name = "db", "max-connections" = 200 }', "max-connections", 0, "variable.other.property", "envcQuotedKeyText"),
    ('let r = { name = "db", "max-connections" = 200 }', "db", 0, "string.quoted.double", "envcString"),
    ('let r = { name = "db", "max-connections" = 200 }', "db", 0, "!variable", None),
    ("let d = {for h in hosts => h = 1}", "h", 1, "!variable.other.property", ""),
    ("let d = {for h in hosts => h = 1}", "for", 0, "keyword.control.loop", "envcRepeat"),
    ("let d = {for h in hosts => h = 1}", "in", 0, "keyword.control.loop", "envcRepeat"),
    ("let r = if a and not b { 1 } else { 2 }", "if", 0, "keyword.control.conditional", "envcConditional"),
    ("let r = if a and not b { 1 } else { 2 }", "not", 0, "keyword.operator.logical", "envcLogical"),
    ("let ok = a != b", "!=", 0, "keyword.operator.comparison", "envcOperator"),
    ("let ok = a ! b", "!", 0, "invalid.illegal", "envcError"),
    ("let ok = a && b", "&&", 0, "invalid.illegal", "envcError"),
    ("let q = 'x'", "'", 0, "invalid.illegal", "envcError"),
    ("let xs = [for i in 0..count => i]", "..", 0, "keyword.operator.range", "envcOperator"),
    ("let xs = [for i in 0..count => i]", "count", 0, "!variable.other.property", ""),
    ('import "std/debian" as deb', "import", 0, "keyword.control.import", "envcInclude"),
    ('import "std/debian" as deb', "deb", 1, "entity.name.namespace", "envcModuleAlias"),
    ('assert n >= 0, "negative"', "assert", 0, "keyword.control", "envcAssert"),
    ("let t = true", "true", 0, "constant.language.boolean", "envcBoolean"),
]


def check_snippets(g):
    print("5. snippets")
    for src, needle, nth, prefix, _ in EXPECT:
        chars, _ = scopes_of(g, src, needle, nth)
        negate = prefix.startswith("!")
        p = prefix.lstrip("!")
        ok = all(has_scope(s, p) != negate for s in chars)
        if not ok:
            fail("%r (#%d) in %r: expected %s%s, got %s" % (needle, nth, src, "no " if negate else "", p, chars[0]))
    print("   %d expectations" % len(EXPECT))


# ---- 6: Vim --------------------------------------------------------------------------------

VIM_SCRIPT = r"""
set nocompatible
let &runtimepath = g:envc_vim_dir . ',' . &runtimepath
filetype on
syntax on
let g:out = []
" Errors of our syntax file only: Vim's own sh syntax (loaded first for *.env) is not ours.
function! SetEnvc(file) abort
  let v:errmsg = ''
  set filetype=envc
  if v:errmsg !=# ''
    call add(g:out, 'errmsg ' . a:file . ' ' . v:errmsg)
  endif
endfunction
function! Detect(file) abort
  execute 'silent edit' fnameescape(a:file)
  call add(g:out, 'ft ' . a:file . ' ' . &filetype)
endfunction
function! Probe(file, probes) abort
  execute 'silent edit' fnameescape(a:file)
  call SetEnvc(a:file)
  for [l:id, l:line, l:col] in a:probes
    let l:stack = map(synstack(l:line, l:col), 'synIDattr(v:val, "name")')
    call add(g:out, 'syn ' . l:id . ' ' . synIDattr(synID(l:line, l:col, 1), 'name') . ' ' . join(l:stack, ','))
  endfor
endfunction
function! Scan(file) abort
  execute 'silent edit' fnameescape(a:file)
  call SetEnvc(a:file)
  for l:n in range(1, line('$'))
    let l:text = getline(l:n)
    for l:c in range(1, len(l:text))
      let l:name = synIDattr(synID(l:n, l:c, 1), 'name')
      if l:name =~# 'Error$'
        call add(g:out, 'error ' . a:file . ':' . l:n . ':' . l:c . ' ' . l:name . ' ' . l:text[l:c - 1 : l:c + 8])
        break
      endif
    endfor
  endfor
  " A region left open would reach a line appended after the file.
  call append('$', 'zzz')
  call add(g:out, 'open ' . a:file . ' ' . join(map(synstack(line('$'), 1), 'synIDattr(v:val, "name")'), ','))
  set nomodified
endfunction
"""


# Regions that colour nothing themselves: a character inside one alone has no group of its own.
VIM_CONTEXT = {"", "envcInterp", "envcBlock", "envcRecordComp", "envcParen", "envcBracket",
               "envcCallArgs", "envcParams", "envcTypeRange", "envcRecordType", "envcTypeArgs"}


VIM_KEYWORD_GROUPS = ("envcConditional", "envcRepeat", "envcInclude", "envcAssert", "envcBoolean",
                      "envcLogical", "envcDecl", "envcTypedef", "envcFn")


def vim_vocabulary_probes(vocab):
    """The Rust vocabulary of section 3, as (source, needle, occurrence, Vim group(s))."""
    out = [(kw, kw, 0, VIM_KEYWORD_GROUPS) for kw in vocab["keywords"]]
    out += [("let x = 3%s" % u, "3" + u, 0, "envcSize") for u in vocab["size units"]]
    out += [('let s = "a\\%sb"' % c, "\\" + c, 0, "envcEscape") for c in vocab["escapes"]]
    out += [("let n = %s(name = x)" % k, k, 0, "envcNodeCall") for k in vocab["node kinds"]]
    out += [("let c = %s(x)" % k, k, 0, "envcCheckCall") for k in vocab["check kinds"]]
    out += [("let v = %s(x)" % f, f, 0, "envcBuiltinCall") for f in vocab["library functions"]]
    out += [("let v: %s = x" % t, t, 0, ("envcBuiltinType", "envcNodeType")) for t in vocab["type names"]]
    return out


def check_vims(sources, vocab):
    print("6. Vim syntax and detection")
    found = [v for v in (shutil.which("vim"), shutil.which("nvim")) if v]
    if not found:
        print("   skipped: neither vim nor nvim is installed")
    for vim in found:
        check_vim(vim, sources, vocab)


def check_vim(vim, sources, vocab):
    tmp = tempfile.mkdtemp(prefix="envc-vim-")
    try:
        calls = []
        # Detection cases: (relative path, content, expected filetype is envc).
        detect = [
            ("detect/a.env", "# header\n\nlet x = 1\n", True),
            ("detect/b.env", "FOO=bar\nexport BAR=1\n", False),
            ("detect/c.env", "type = production\n", False),
            ("detect/d.env", "# only a comment\n", False),
            ("detect/e.env", "# only a comment\n", True),  # e.lock beside it
            ("detect/f.env", "", False),
            ("detect/.env", "let x = 1\n", False),
            ("detect/proj/sub/g.env", "\n", True),  # envc.toml in detect/proj
            ("detect/h.env", "  import \"std/debian\"\n", True),
            ("detect/i.env", "assert=1\n", False),
        ]
        markers = ["detect/e.lock", "detect/proj/envc.toml"]
        for rel, content, _ in detect:
            write(tmp, rel, content)
        for rel in markers:
            write(tmp, rel, "")
        for rel, _, _ in detect:
            calls.append("call Detect(%s)" % vim_str(os.path.join(tmp, rel)))
        for rel in ("std/debian.env", "examples/quickstart.env"):
            calls.append("call Detect(%s)" % vim_str(os.path.join(ROOT, rel)))
        # Real sources: no Error group anywhere, no region left open.
        scanned = []
        for i, (name, text) in enumerate(sources):
            path = write(tmp, "src/%03d.txt" % i, text)  # .txt: no detour through sh
            scanned.append((path, name))
            calls.append("call Scan(%s)" % vim_str(path))
        # Snippets.
        probes = {}
        expect = [(src, needle, nth, group) for src, needle, nth, _, group in EXPECT]
        expect += vim_vocabulary_probes(vocab)
        for i, (src, needle, nth, group) in enumerate(expect):
            if group is None:
                continue
            path = write(tmp, "snip/%03d.txt" % i, src)
            at = -1
            for _ in range(nth + 1):
                at = src.index(needle, at + 1)
            line = src.count("\n", 0, at) + 1
            line_start = src.rfind("\n", 0, at) + 1
            col = len(src[line_start:at].encode("utf-8")) + 1
            cols = [col + len(needle[:k].encode("utf-8")) for k in range(len(needle)) if needle[k] != "\n"]
            probes[path] = [(i, k, line, c) for k, c in enumerate(cols)]
            calls.append("call Probe(%s, [%s])" % (vim_str(path), ", ".join(
                "['%d_%d', %d, %d]" % (i, k, line, c) for _, k, line, c in probes[path])))
        out_path = os.path.join(tmp, "out.txt")
        script = os.path.join(tmp, "check.vim")
        with open(script, "w", encoding="utf-8") as f:
            f.write("let g:envc_vim_dir = %s\n" % vim_str(VIM_DIR))
            f.write(VIM_SCRIPT)
            f.write("\n".join(calls) + "\n")
            f.write("call writefile(g:out, %s)\n" % vim_str(out_path))
            f.write("qa!\n")
        # `-u NONE`: no user configuration; `-es`: silent Ex mode (nvim has no `-N` to give).
        args = ["-u", "NONE", "-i", "NONE", "-n", "-es", "-S", script]
        if os.path.basename(vim) == "vim":
            args.insert(0, "-N")
        proc = subprocess.run([vim] + args, stdin=subprocess.DEVNULL, capture_output=True,
                              text=True, timeout=300)
        version = subprocess.run([vim, "--version"], capture_output=True, text=True).stdout.splitlines()[0]
        if not os.path.exists(out_path):
            # Vim's exit status alone says little: its own sh syntax, loaded for *.env before
            # our detection runs, may report errors that are not ours.
            fail("%s wrote no results (exit %d): %s%s" % (version, proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:]))
            return
        results = open(out_path, encoding="utf-8").read().splitlines()
        fts = {}
        groups = {}
        errors_seen = set()
        for r in results:
            kind, _, rest = r.partition(" ")
            if kind == "ft":
                path, _, ft = rest.rpartition(" ")
                fts.setdefault(path, ft)
            elif kind == "syn":
                key, name, stack = (rest.split(" ") + ["", ""])[:3]
                groups[key] = (name, stack.split(",") if stack else [])
            elif kind == "error":
                path, _, what = rest.partition(":")
                fail("%s: %s:%s" % (version, dict(scanned).get(path, path), what))
            elif kind == "open":
                path, _, stack = rest.partition(" ")
                if stack:
                    fail("%s: %s: regions still open at the end: %s" % (version, dict(scanned).get(path, path), stack))
            elif kind == "errmsg":
                message = rest.partition(" ")[2]
                if message not in errors_seen:
                    errors_seen.add(message)
                    fail("%s: error loading the envc syntax: %s" % (version, message))
        for rel, _, want in detect:
            ft = fts.get(os.path.join(tmp, rel), "?")
            if (ft == "envc") != want:
                fail("%s: detection: %s got filetype %r, expected %s" % (version, rel, ft, "envc" if want else "not envc"))
        for rel in ("std/debian.env", "examples/quickstart.env"):
            if fts.get(os.path.join(ROOT, rel)) != "envc":
                fail("%s: detection: %s got filetype %r" % (version, rel, fts.get(os.path.join(ROOT, rel))))
        n = 0
        for path, plist in probes.items():
            for i, k, line, c in plist:
                src, needle, nth, group = expect[i]
                name, stack = groups.get("%d_%d" % (i, k), ("?", []))
                n += 1
                wanted = group if isinstance(group, tuple) else (group,)
                ok = name in VIM_CONTEXT if group == "" else any(w in stack for w in wanted)
                if not ok:
                    fail("%s: %r (#%d) in %r, char %d: expected %s, got %s" % (version, 
                        needle, nth, src, k, repr(group) if group else "no group", stack or "none"))
                    break
        print("   %s: %d detection cases, %d sources scanned, %d characters probed" % (
            version, len(detect) + 2, len(sources), n))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def write(tmp, rel, content):
    path = os.path.join(tmp, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(content)
    return path


def vim_str(s):
    return "'" + s.replace("'", "''") + "'"


def main():
    try:
        with open(GRAMMAR, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        print("FAIL %s is not valid JSON: %s" % (GRAMMAR, e))
        return 1
    print("%s: valid JSON" % os.path.relpath(GRAMMAR, ROOT))
    check_structure(data)
    # Python's re always; Oniguruma too when libonig is installed, so that the tokenizer
    # runs on the regex engine VS Code uses.
    engines = [PythonEngine()]
    try:
        onig = OnigEngine.load()
    except (OSError, ValueError, AttributeError) as e:
        onig = None
        print("   (libonig found but not usable: %s)" % e)
    if onig:
        engines.append(onig)
    grammars = [Grammar(data, e) for e in engines]
    check_regexes(grammars)
    if not onig:
        print("   Oniguruma: skipped, libonig is not installed")
    if failures:  # the tokenizer needs every regex
        print("\n%d failure(s)" % len(failures))
        return 1
    vocab = rust_vocabulary()
    sources = valid_sources()
    for g in grammars:
        print("-- tokenizing with %s" % g.engine.name)
        check_vocabulary(g, vocab)
        check_sources(g, sources)
        check_snippets(g)
    if "--no-vim" not in sys.argv[1:]:
        check_vims(sources, vocab)
    if failures:
        print("\n%d failure(s)" % len(failures))
        return 1
    print("\nall checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
