#!/usr/bin/env python3
"""The layering check: arrows between the product's folders run one way.

    scripts/check_layers.py SRCDIR BUILDDIR     (make check-layers)
    scripts/check_layers.py --docs SRCDIR       (docs/architecture.md)

A module is a .c file and its .h (or a lone .h) in one folder. Module A
depends on module B when A's .c or .h includes B's header ("folder/b.h"),
or when A's object file uses a symbol B's object file defines (nm: the
calls and data references the linker resolves). Both graphs are checked:

  - every folder is in ORDER, and an arrow between two folders goes from
    a later rank to an earlier one (siblings of one rank, the drivers,
    never depend on each other);
  - the operations side and main.c reach a driver only through the
    driver table and the registry (FORBIDDEN);
  - inside a folder the modules form no circle.

With --docs it checks instead that docs/architecture.md's module table
names every module of these folders and of tools/ under its folder, and
nothing else, and that the data flow goes through ts_group_process.

Prints every violation and exits 1 when there is one, 0 otherwise."""

import os
import re
import subprocess
import sys

# Bottom first. One rank may hold several folders that must not depend on
# each other.
ORDER = [
    ["geometry"],
    ["inference"],
    ["mechanisms"],
    ["engine"],
    ["wire"],
    ["state"],
    ["datapath"],
    ["drivers/zmq", "drivers/jetstream", "drivers/mqtt"],
    ["drivers"],
    ["ops"],
    ["daemon"],
]
# Arrows the order allows but the design does not: the operations side
# sees drivers only through datapath/driver.h and drivers/driver_registry.h.
FORBIDDEN = {
    ("ops", "drivers/zmq"), ("ops", "drivers/jetstream"),
    ("daemon", "drivers/zmq"), ("daemon", "drivers/jetstream"),
    ("ops", "drivers/mqtt"), ("daemon", "drivers/mqtt"),
}

RANK = {folder: i for i, rank in enumerate(ORDER) for folder in rank}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


# Described by the docs, but outside the order: the CLI sits above it all.
DOCUMENTED_ONLY = ["tools"]
TABLE_ROW = re.compile(r"^\|\s*(`([^`]*)/`)?\s*\|([^|]*)\|")


def modules(srcdir, extra=()):
    """{module: [files]} for every .c/.h under the ordered folders (and
    `extra` ones), and the folders found that are not in the order."""
    found, unknown = {}, set()
    known = set(RANK) | set(extra)
    for top in sorted({f.split("/")[0] for f in known}):
        for root, _dirs, files in os.walk(os.path.join(srcdir, top)):
            folder = os.path.relpath(root, srcdir)
            for name in files:
                if not name.endswith((".c", ".h")):
                    continue
                if folder not in known:
                    unknown.add(folder)
                    continue
                module = folder + "/" + name[:-2]
                found.setdefault(module, []).append(
                    os.path.join(folder, name))
    return found, unknown


def folder_of(module):
    return module.rsplit("/", 1)[0]


def include_arrows(srcdir, mods):
    """[(from, to, where)] for every include of another module."""
    arrows = []
    for module, files in mods.items():
        for path in files:
            with open(os.path.join(srcdir, path), encoding="utf-8") as f:
                for number, line in enumerate(f, 1):
                    m = INCLUDE.match(line)
                    if not m or not m.group(1).endswith(".h"):
                        continue
                    target = m.group(1)[:-2]
                    if target in mods and target != module:
                        arrows.append((module, target,
                                       "%s:%d includes %s" %
                                       (path, number, m.group(1))))
    return arrows


def nm_symbols(obj):
    """(defined, undefined) global symbol names of an object file."""
    out = subprocess.run(["nm", "-P", obj], capture_output=True, text=True,
                         check=True).stdout
    defined, undefined = set(), set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 2:
            continue
        name, kind = parts[0], parts[1]
        if kind == "U":
            undefined.add(name)
        elif kind.isupper() and kind not in "NW":
            defined.add(name)
    return defined, undefined


def call_arrows(builddir, mods):
    """[(from, to, where)] for every symbol a module's object uses that
    another module's object defines; and the modules whose object is
    missing (not built)."""
    defined_by, uses, missing = {}, {}, []
    for module, files in mods.items():
        if not any(f.endswith(".c") for f in files):
            continue
        obj = os.path.join(builddir, module + ".o")
        if not os.path.exists(obj):
            missing.append(module)
            continue
        defined, undefined = nm_symbols(obj)
        for name in defined:
            defined_by[name] = module
        uses[module] = undefined
    arrows = []
    for module, names in uses.items():
        for name in sorted(names):
            target = defined_by.get(name)
            if target is not None and target != module:
                arrows.append((module, target, "%s.o uses %s" %
                               (module, name)))
    return arrows, missing


def cycles(nodes, edges):
    """Strongly connected components of more than one node (Tarjan)."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(10000)
    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return found


def check(arrows, kind):
    """The problems of one graph (includes or calls)."""
    problems = []
    within = {}
    for a, b, where in arrows:
        fa, fb = folder_of(a), folder_of(b)
        if fa == fb:
            within.setdefault(a, {}).setdefault(b, where)
            continue
        if (fa, fb) in FORBIDDEN:
            problems.append("%s: %s -> %s is not allowed (%s)" %
                            (kind, fa, fb, where))
        elif RANK[fb] == RANK[fa]:
            problems.append("%s: %s -> %s: folders of one rank must not "
                            "depend on each other (%s)" % (kind, fa, fb, where))
        elif RANK[fb] > RANK[fa]:
            problems.append("%s: %s -> %s runs against the order (%s)" %
                            (kind, fa, fb, where))
    edges = {a: set(bs) for a, bs in within.items()}
    for component in cycles(set(edges) | {b for bs in edges.values()
                                          for b in bs}, edges):
        members = set(component)
        links = ["%s -> %s (%s)" % (a, b, within[a][b])
                 for a in component for b in sorted(within.get(a, {}))
                 if b in members]
        problems.append("%s: a circle within %s: %s" %
                        (kind, folder_of(component[0]), "; ".join(links)))
    return problems


def documented(doc_text):
    """{module} the architecture table names, as folder/stem."""
    names, folder = set(), None
    for line in doc_text.splitlines():
        m = TABLE_ROW.match(line)
        if not m:
            folder = None if not line.startswith("|") else folder
            continue
        if m.group(2) is not None:
            folder = m.group(2)
        if folder is None:
            continue
        for name in re.findall(r"`([A-Za-z0-9_]+)`", m.group(3)):
            names.add(folder + "/" + name)
    return names


def check_docs(srcdir):
    path = os.path.join(srcdir, "docs", "architecture.md")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    mods, unknown = modules(srcdir, DOCUMENTED_ONLY)
    names = documented(text)
    problems = ["docs/architecture.md does not describe module %s" % m
                for m in sorted(set(mods) - names)]
    problems += ["docs/architecture.md names module %s, which does not "
                 "exist" % m for m in sorted(names - set(mods))]
    problems += ["folder %s is not in the layer order" % f
                 for f in sorted(unknown)]
    if "ts_group_process" not in text:
        problems.append("docs/architecture.md's data flow does not go "
                        "through the group body (ts_group_process)")
    for p in problems:
        print("check_architecture_docs: " + p)
    print("check_architecture_docs: %d modules described: %s" %
          (len(mods), "FAILED" if problems else "ok"))
    return 1 if problems else 0


def main(argv):
    if len(argv) == 3 and argv[1] == "--docs":
        return check_docs(argv[2])
    if len(argv) != 3:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    srcdir, builddir = argv[1], argv[2]
    mods, unknown = modules(srcdir)
    problems = ["folder %s is not in the layer order (scripts/"
                "check_layers.py, ORDER)" % f for f in sorted(unknown)]
    problems += check(include_arrows(srcdir, mods), "include")
    calls, missing = call_arrows(builddir, mods)
    if missing:
        problems.append("not built, so not checked: %s" %
                        ", ".join(m + ".o" for m in sorted(missing)))
    problems += check(calls, "call")
    for p in problems:
        print("check_layers: " + p)
    folders = " -> ".join(" | ".join(rank) for rank in ORDER)
    print("check_layers: %d modules, order %s: %s" %
          (len(mods), folders, "FAILED" if problems else "ok"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
