"""``--where`` is never run as code: mindexp's own condition language
(:mod:`mindexp.rundir.where`) answers everything outside the catalog's SQL
subset; code is refused in one line before any run or catalog is read."""
import pathlib
import re

import pytest

from mindexp.manage import queried
from mindexp.rundir import where as condition

from rundirs import make_run

FRAMEWORK = pathlib.Path(condition.__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    out = tmp_path_factory.mktemp("safe") / "outputs"
    rows = [("a", 0.2, "adam", 1.95), ("b", 0.05, "sgd", 1.5), ("c", 0.0005, "momentum", 2.0),
            ("d", 0.01, "adam", 1.0)]
    for i, (name, lr, optimizer, weight) in enumerate(rows):
        make_run(out, name, config={"lr": lr, "optimizer": optimizer},
                 losses=(1.0, [0.001, 0.3, 0.005, 0.02][i]),
                 params={"dense.weight": [weight - 0.1, weight]},
                 meta={"started_at": f"2026-01-0{i + 1}T00:00:00+00:00",
                       "params": {"dense.weight": weight}})
    make_run(out, "e", config={"lr": 0.001}, losses=(1.0, float("nan")),   # sgd, no loss
             meta={"started_at": "2026-01-09T00:00:00+00:00"})
    return out


def _snapshot(folder):
    return sorted((str(p.relative_to(folder)), p.stat().st_size, p.stat().st_mtime_ns)
                  for p in pathlib.Path(folder).rglob("*"))


@pytest.mark.parametrize("command", [("runs",), ("runs", "--csv"), ("gc", "--dry-run"),
                                     ("gc", "--yes")])
@pytest.mark.parametrize("code", [
    "@os.system('touch {f}') == 0",                       # pandas' @-names
    "@os.system('touch {f}')",
    "__import__('os').system('touch {f}') == 0",          # a call
    "lr.__class__.__init__.__globals__ == 0",             # attributes
    "(lambda: __import__('os').system('touch {f}'))() == 0",
    "[c for c in ().__class__.__base__.__subclasses__()] == 1",
])
def test_code_in_where_is_refused_in_one_line_and_touches_nothing(cli, tmp_path, command,
                                                                   code):
    work = tmp_path / "copy"
    make_run(work, "r1")
    before = _snapshot(work)
    planted = tmp_path / "pwned"
    listed = cli(*command, work, "--where", code.format(f=planted))
    assert listed.returncode == 2, (listed.stdout, listed.stderr)
    lines = listed.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in listed.stderr, listed.stderr
    assert re.search(r"--where (holds .* which is not accepted|cannot be read \(.*\)); "
                     r"it takes only comparisons", lines[0]), lines[0]
    assert f"Received: --where {code.format(f=planted)!r}" in lines[0]
    assert not planted.exists() and listed.stdout == ""
    assert _snapshot(work) == before     # no catalog made, no run removed


def _ids(listed):
    assert listed.returncode == 0, listed.stderr
    return sorted(line.split()[0].rsplit("/", 1)[-1] for line in listed.stdout.splitlines()[1:]
                  if line.strip() and line != "no runs match")


@pytest.mark.parametrize("expression, ids", [
    # every form the manual shows (docs/many-runs.md, docs/scaling.md)
    ("optimizer == 'adam' and lr > 0.1", ["a"]),
    ("`dense.weight` > 1.9", ["a", "c"]),
    ("lr < 0.001 and final_loss < 0.01", ["c"]),
    ("optimizer == \"x'; DROP TABLE runs\"", []),
    ("lr < 0.1 & final_loss < 0.01", ["c"]),                  # pandas' operators
    ("optimizer == 'sgd' | lr > 0.1", ["a", "b", "e"]),
    ("~(optimizer == 'adam')", ["b", "c", "e"]),
    ("optimizer in ['sgd', 'momentum']", ["b", "c", "e"]),
    ("optimizer not in ('sgd', 'momentum')", ["a", "d"]),
    ("optimizer == ['sgd', 'momentum']", ["b", "c", "e"]),          # == a list: in, as pandas
    ("0.001 < lr < 0.1", ["b", "d"]),                          # chained
    ("lr * 2 < 0.002", ["c"]),                                 # arithmetic on numbers
    ("-lr < -0.1", ["a"]),
    ("min_loss < 0.01", ["a", "c"]),                           # a column only the logs give
    ("final_loss != 0.3", ["a", "c", "d", "e"]),               # NaN matches only !=
    ("not (lr > 0.01) and optimizer == 'momentum'", ["c"]),
])
def test_every_documented_form_answers_without_running_code(cli, root, monkeypatch, expression,
                                                            ids):
    assert _ids(cli("runs", root, "--where", expression)) == ids
    with monkeypatch.context() as patch:   # the DataFrame path: condition.py alone
        patch.setattr(queried, "listed", lambda *a, **k: None)
        assert _ids(cli("runs", root, "--where", expression)) == ids


def test_a_field_named_like_a_python_keyword_is_a_column(cli, tmp_path, monkeypatch):
    for i, value in enumerate((0.5, 0.01)):
        make_run(tmp_path / "kw", f"k{i}", config={"lambda": value, "class": "x"})
    for expression in ("lambda > 0.1", "lambda > 0.1 and class == 'x'", "`lambda` > 0.1"):
        assert _ids(cli("runs", tmp_path / "kw", "--where", expression)) == ["k0"]
        with monkeypatch.context() as patch:
            patch.setattr(queried, "listed", lambda *a, **k: None)
            assert _ids(cli("runs", tmp_path / "kw", "--where", expression)) == ["k0"]


def test_an_unknown_column_and_text_ordered_against_numbers_are_one_line(cli, root):
    unknown = cli("runs", root, "--where", "lrate > 1 | lr > 1")
    assert unknown.returncode == 2 and "unknown column 'lrate'. Did you mean lr?" in \
        unknown.stderr and len(unknown.stderr.strip().splitlines()) == 1
    ordered = cli("runs", root, "--where", "optimizer * 3 == 'a'")
    assert ordered.returncode == 2 and "does not hold numbers" in ordered.stderr


def test_the_grammar_refuses_each_thing_outside_it():
    from mindexp.errors import ConfigError
    for text, what in [("lr ** 2 > 1", "an operator other than + - * /"),
                       ("lr[0] > 1", "a subscript"), ("lr is None", "the constant None"),
                       ("-(lr > 1)", "- before a condition"), ("{1: 2} == lr", "a dict"),
                       ("f'{lr}' == '1'", "an f-string"), ("(1, lr) == 1", "a list of something"),
                       ("`dense.weight > 1", "a backtick that is not closed")]:
        with pytest.raises(ConfigError, match=re.escape(what)):
            condition.parse(text)
    deep = condition.parse("(" * 150 + "lr > 1" + ")" * 150)   # parentheses: fine
    assert deep.columns == ("lr",)
    with pytest.raises(ConfigError, match="nested too deeply|cannot be read"):
        condition.parse("-" * 100_000 + "lr > 1")


def test_no_query_or_eval_in_the_framework():
    """Nothing in framework/ calls Python's eval/exec, pandas' eval or any call
    with ``engine="python"`` (how DataFrame.query resolved ``@os.system``)."""
    import ast
    found = []
    for path in FRAMEWORK.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            if isinstance(func, ast.Name) and func.id in ("eval", "exec") or \
                    isinstance(func, ast.Attribute) and func.attr == "eval" and \
                    isinstance(func.value, ast.Name) and func.value.id in ("pd", "pandas") or \
                    any(k.arg == "engine" for k in node.keywords):
                found.append(f"{path.relative_to(FRAMEWORK)}:{node.lineno}")
    assert found == []
    assert "engine=" not in (FRAMEWORK / "manage" / "runs.py").read_text(encoding="utf-8")
