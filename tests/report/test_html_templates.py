"""Tests of the HTML report's templates: user text never reaches the page as markup, quotes
are escaped the way the report always wrote them, and the templates ship with the package."""

from __future__ import annotations

from html.parser import HTMLParser
from importlib import resources
from pathlib import Path

import numpy as np
import pytest
from markupsafe import Markup

from miaudit.metrics import evaluate
from miaudit.records.outcomes import AttackOutcome, AuditResult
from miaudit.report.html import render_html
from miaudit.report.templating import environment, render
from miaudit.verdict.records import ReleaseVerdict

N = 200
PNG = b"\x89PNG\r\n\x1a\n"  # render_html embeds bytes as they are
EVIL = "<script>alert('x & \"y\"')</script>"
# the only tags the report writes itself
TAGS = {"html", "head", "meta", "title", "style", "body", "p", "b", "i", "code", "h1", "h2",
        "h3", "table", "thead", "tbody", "tr", "th", "td", "small", "ul", "li", "figure", "img",
        "figcaption", "pre"}


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: set[str] = set()
        self.attrs: list[tuple[str, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        self.attrs += attrs


def _result(meta: dict, names: tuple[str, ...] = ("lira",)) -> AuditResult:
    rng = np.random.default_rng(0)
    members = np.arange(N) % 2 == 0
    outcomes = []
    for i, name in enumerate(names):
        scores = rng.normal(size=N) + (2.0 - i) * members
        outcomes.append(AttackOutcome.from_dicts(name, scores,
                                                 evaluate(scores, members, n_bootstrap=0)))
    return AuditResult(np.arange(N), members, outcomes, meta=meta)


def _exposure(attack: str) -> dict:
    rows = [{"rank": 1, "row": 7, "label": EVIL, "predicted": EVIL, "score": 2.5,
             "flagged_at_fpr": 0.0, "nonmembers_above": 0}]
    return {"attack": attack, "n_members": 100, "rows": rows}


def _assert_no_markup_from(page: str) -> None:
    parsed = _Tags()
    parsed.feed(page)
    assert parsed.tags <= TAGS, parsed.tags - TAGS
    assert {name for name, _ in parsed.attrs} <= {"lang", "charset", "class", "alt", "src"}
    assert "<script" not in page and "&lt;script&gt;" in page


@pytest.mark.parametrize("audited", [False, True], ids=["run", "audit"])
def test_user_text_is_escaped_everywhere(audited: bool) -> None:
    meta = {"dataset": EVIL, "target": EVIL, "run": EVIL, "warnings": [EVIL],
            "models": {EVIL: {"acc": 0.9, EVIL: EVIL}}, "config": {"name": EVIL},
            "extra": [EVIL]}
    if audited:
        meta["verdict"] = ReleaseVerdict(level="exposed", headline=EVIL, paragraphs=(EVIL,),
                                         caveats=(EVIL,), attack=EVIL)
        meta["exposure"] = _exposure(EVIL)
    page = render_html(_result(meta, names=(EVIL, "loss")), {EVIL: PNG, "exposed": PNG})
    _assert_no_markup_from(page)
    # quotes as html.escape writes them, in text and in the figure's alt attribute
    assert f'<img alt="{EVIL}"' not in page
    assert ('<img alt="&lt;script&gt;alert(&#x27;x &amp; &quot;y&quot;&#x27;)&lt;/script&gt;"'
            in page)
    assert "&#34;" not in page and "&#39;" not in page


def test_an_attack_name_is_escaped_in_the_table_summary_and_exposure() -> None:
    page = render_html(_result({}, names=("<b>loud</b> & co",)), {})
    assert "<b>loud</b>" not in page
    escaped = "&lt;b&gt;loud&lt;/b&gt; &amp; co"
    assert f"<td>{escaped} ★</td>" in page  # the results table, its strongest row
    assert f"leaked most here is <b>{escaped}</b>" in page  # what this means
    assert f"highest score under <b>{escaped}</b>" in page  # most exposed samples


def test_an_exposure_without_its_member_count_says_so() -> None:
    exposure = _exposure("lira")
    del exposure["n_members"]  # used to fail: '?' cannot be formatted with ','
    page = render_html(_result({"exposure": exposure}), {})
    assert "training samples (of ?)" in page


def test_the_environment_escapes_and_keeps_what_is_marked_safe() -> None:
    env = environment()
    assert env.autoescape is True
    template = env.from_string("<p>{{ text }}|{{ safe }}|{{ n }}</p>")
    assert (template.render(text="a<b>&\"'", safe=Markup("<i>x</i>"), n=1.5)
            == "<p>a&lt;b&gt;&amp;&quot;&#x27;|<i>x</i>|1.5</p>")
    with pytest.raises(Exception, match="undefined"):  # a misspelt name fails
        env.from_string("{{ nope }}").render()
    assert render("macros.html.j2") == ""  # macros only: nothing on their own


def test_every_template_ships_with_the_package() -> None:
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    folder = resources.files("miaudit.report") / "templates"
    names = sorted(p.name for p in folder.iterdir())
    assert {"report.html.j2", "macros.html.j2", "exposure.html.j2"} <= set(names)
    root = Path(__file__).resolve().parents[2]
    pyproject = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    globs = pyproject["tool"]["setuptools"]["package-data"]["miaudit.report"]
    assert globs == ["templates/*.j2"] and all(n.endswith(".j2") for n in names)
    deps = pyproject["project"]["dependencies"]
    assert any(d.startswith("jinja2==") for d in deps)
