#!/usr/bin/env python3
"""Checks that the documentation names what exists.

    scripts/check-docs.py [--headwayd PATH] [--names-in FILE.md]...

- Every `Sources/...` path named in README.md, ARCHITECTURE.md, CONTRIBUTING.md and
  docs/*.md exists.
- ARCHITECTURE.md's targets table names every folder of Sources/ and nothing else, and its
  "imports" column is what Package.swift declares, so the map's arrows are the compiler's.
- Every Swift name in backticks in ARCHITECTURE.md and CONTRIBUTING.md (a type such as
  `TaskStore`, or a member such as `TaskStore.progress`) is declared in Sources/ or
  Tests/; `--names-in` checks another page's names too.
- Every relative link of those pages leads to a file that exists, and every `#anchor` to a
  heading of that file.
- With `--headwayd PATH`, every option `headwayd --help` lists is named in
  docs/operating.md as `--name`.
- Every metric family the daemon renders (`out.family("headway_…"` and the like) is in
  the metrics table of docs/operating.md.

Prints each problem and exits 1 if there is any. Run by `make test`
(Tests/integration/test_docs.py).
"""
import argparse
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
PAGES = ["README.md", "ARCHITECTURE.md", "CONTRIBUTING.md"] + sorted(
    str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))
NAME_PAGES = ["ARCHITECTURE.md", "CONTRIBUTING.md"]

# Backticked words that look like Swift names but are not declared by Headway.
NOT_SWIFT = {"ParsableCommand"}


def swift_sources():
    """The text of every Swift file under Sources/ and Tests/."""
    files = list((ROOT / "Sources").rglob("*.swift")) + list((ROOT / "Tests").rglob("*.swift"))
    return "\n".join(f.read_text(errors="replace") for f in files)


def declared(name, text):
    """Whether `name` is declared (a type, function, property or case) in `text`."""
    return re.search(r"\b(class|struct|enum|protocol|actor|typealias|extension|func|case|let|var)\s+"
                     + re.escape(name) + r"\b", text) is not None


def check_paths(problems):
    for page in PAGES:
        text = (ROOT / page).read_text()
        for path in sorted(set(re.findall(r"\bSources/[A-Za-z0-9_./-]*[A-Za-z0-9_]", text))):
            if not (ROOT / path).exists():
                problems.append(f"{page}: names {path}, which does not exist")


def package_targets():
    """Package.swift's targets and the targets each depends on (libraries of other packages excluded)."""
    text = (ROOT / "Package.swift").read_text()
    targets = {}
    for match in re.finditer(r'\.(?:target|executableTarget|systemLibrary)\(\s*name:\s*"([^"]+)"(.*?)\)\s*,\s*\n',
                             text, re.S):
        name, rest = match.group(1), match.group(2)
        deps = re.search(r"dependencies:\s*\[(.*?)\]", rest, re.S)
        targets[name] = set(re.findall(r'"([^"]+)"', deps.group(1))) if deps else set()
    return targets


def check_targets(problems):
    text = (ROOT / "ARCHITECTURE.md").read_text()
    rows = re.findall(r"^\| (`[^|]+`) \| (.*?) \| (.*?) \|$", text, re.M)
    table = {}
    for names, imports, _ in rows:
        if "`Sources/" in names or names.startswith("`dashboard"):
            continue
        for name in re.findall(r"`([^`]+)`", names):
            table[name] = set(re.findall(r"`([^`]+)`", imports)) if imports.strip() != "—" else set()
    folders = {p.name for p in (ROOT / "Sources").iterdir() if p.is_dir()}
    package = package_targets()
    for folder in sorted(folders - set(table)):
        problems.append(f"ARCHITECTURE.md: the targets table does not name Sources/{folder}")
    for name in sorted(set(table) - folders):
        problems.append(f"ARCHITECTURE.md: the targets table names {name}, which is no folder of Sources/")
    for name in sorted(set(table) & set(package)):
        if table[name] != package[name]:
            problems.append(f"ARCHITECTURE.md: {name} imports {sorted(package[name])} in Package.swift, "
                            f"the table says {sorted(table[name])}")


def check_names(pages, problems):
    source = swift_sources()
    targets = {p.name for folder in ("Sources", "Tests") for p in (ROOT / folder).iterdir() if p.is_dir()}
    for page in pages:
        text = (ROOT / page).read_text()
        # In drawings, names in CamelCase (two humps at least, as `EventBroker`).
        drawn = set()
        for block in re.findall(r"```\n(.*?)```", text, flags=re.S) if page == "ARCHITECTURE.md" else []:
            drawn |= set(re.findall(r"\b((?:[A-Z][a-z0-9]+){2,}[A-Za-z0-9]*(?:\.[a-z][A-Za-z0-9]*)?)\b", block))
        text = re.sub(r"```.*?```", "", text, flags=re.S)
        quoted = set(re.findall(r"`([A-Z][A-Za-z0-9]*[a-z][A-Za-z0-9]*(?:\.[a-z][A-Za-z0-9]*)?)`", text))
        for word in sorted(quoted | drawn):
            if word in targets or word in NOT_SWIFT:
                continue
            head, _, member = word.partition(".")
            if member in ("swift",):
                if not list((ROOT / "Sources").rglob(word)):
                    problems.append(f"{page}: names the file {word}, which does not exist")
                continue
            if not declared(head, source):
                problems.append(f"{page}: names `{word}`; {head} is declared nowhere in Sources/ or Tests/")
            elif member and not declared(member, source):
                problems.append(f"{page}: names `{word}`; {member} is declared nowhere in Sources/ or Tests/")


def slug(heading):
    """The anchor GitHub gives a heading."""
    heading = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", heading).replace(" ", "-")


def anchors(path):
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    return {slug(h) for h in re.findall(r"^#+ (.+)$", text, re.M)}


def check_links(problems):
    for page in PAGES:
        path = ROOT / page
        text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            file, _, anchor = target.partition("#")
            linked = (path.parent / file).resolve() if file else path
            if not linked.exists():
                problems.append(f"{page}: links to {target}, which does not exist")
            elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
                problems.append(f"{page}: links to {target}: no such heading in {linked.name}")


def check_metrics(problems):
    families = set()
    for file in (ROOT / "Sources").rglob("*.swift"):
        families |= set(re.findall(r'\.(?:family|counters|histograms)\(\s*"(headway_[a-z_]+)"', file.read_text()))
    table = (ROOT / "docs/operating.md").read_text()
    for family in sorted(families):
        if f"`{family}" not in table:
            problems.append(f"docs/operating.md: the metric {family} is not in the metrics table")
    if not families:
        problems.append("no metric family found in Sources/: the pattern of check_metrics needs updating")


def check_settings(headwayd, problems):
    """Every option of `headwayd --help` is named in docs/operating.md."""
    import subprocess
    help_text = subprocess.run([headwayd, "--help"], capture_output=True, text=True, timeout=30).stdout
    names = set(re.findall(r"^  --([a-z][a-z-]*)", help_text, re.M)) - {"help", "version"}
    if not names:
        problems.append(f"{headwayd} --help lists no option: the pattern of check_settings needs updating")
    page = (ROOT / "docs/operating.md").read_text()
    for name in sorted(names):
        if not re.search(r"`--" + re.escape(name) + r"\b", page):
            problems.append(f"docs/operating.md: the setting --{name} is named nowhere")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--names-in", action="append", default=[], metavar="FILE.md",
                        help="also check the Swift names in backticks of this page")
    parser.add_argument("--headwayd", metavar="PATH",
                        help="a built headwayd, whose --help options docs/operating.md must name")
    args = parser.parse_args()
    problems = []
    check_paths(problems)
    check_targets(problems)
    check_names(NAME_PAGES + args.names_in, problems)
    check_links(problems)
    check_metrics(problems)
    if args.headwayd:
        check_settings(args.headwayd, problems)
    for problem in problems:
        print(problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
