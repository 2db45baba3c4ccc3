"""The built website, in a real browser (Debian's chromium driven by Playwright).

A page load costs seconds on CI's two cores, so each chapter of the table of contents is
visited once, in one browser context: its English page, the language switch to its Chinese
page, and the switch back. Every check of a chapter runs during that visit, on the page in
each language: the checks that every chapter gets (formulas, notebook links, images), the
language switch itself, and the chapter's own checks (``@page_check``). Each outcome is
reported by the test named for its check, with the page in the test's id."""

from __future__ import annotations

import functools
import http.server
import json
import re
import shutil
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qs, quote, urlparse

import pytest

from d2l_ext import planner_widget

ROOT = Path(__file__).resolve().parents[1]
SITE = ROOT / "_build" / "site"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
PAGE = "chapters/async-computation.html"
LANGS = ("en", "zh")

playwright = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
yaml = pytest.importorskip("yaml", reason="the book tools need the full environment")


sys.path.insert(0, str(ROOT / "tools"))
from pipeline import toc  # noqa: E402

#: Every page in ``_toc.yml``: a new chapter or section page is checked here once it is listed.
CHAPTERS = toc.pages()


@pytest.fixture(scope="module")
def site_url():
    if not (SITE / "index.html").exists():
        sys.path.insert(0, str(ROOT / "tools"))
        from pipeline.site import build
        build()
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    handler = functools.partial(Quiet, directory=str(SITE))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).exists():
        pytest.fail("chromium is missing: apt-get install chromium (tools/setup.sh does)")
    with playwright.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--no-first-run"])
        yield b
        b.close()


def _watched_page(context):
    """A new page of ``context`` whose ``errors`` list what went wrong in it: console errors,
    uncaught exceptions, failed or refused requests, requests outside the site."""
    page = context.new_page()
    page.errors = []

    def on_console(message):
        if message.type == "error":
            page.errors.append(message.text)

    def on_request(request):
        # The site is self-contained (MathJax included): it reads nothing from elsewhere.
        if urlparse(request.url).hostname != "127.0.0.1":
            page.errors.append(f"requested outside the site: {request.url}")

    page.on("console", on_console)
    page.on("request", on_request)
    # (a request cut short because the test navigated on is not a failure of the site)
    page.on("requestfailed", lambda r: r.failure != "net::ERR_ABORTED"
            and page.errors.append(f"failed to load {r.url}: {r.failure}"))
    page.on("response", lambda r: r.status >= 400 and page.errors.append(f"{r.status} {r.url}"))
    page.on("pageerror", lambda e: page.errors.append(str(e)))
    return page


@pytest.fixture
def page(browser):
    context = browser.new_context()
    yield _watched_page(context)
    context.close()


def _visible(page, selector):
    return page.eval_on_selector_all(
        selector, "els => els.map(e => e.offsetParent !== null || e.getClientRects().length > 0)")


# ---- The visit of a chapter: one load per language, every check on it ----

#: A chapter's own checks: chapter -> [(check, the languages it runs in)], see page_check.
PAGE_CHECKS: dict[str, list] = {}


def _formulas_render(page, name, lang):
    page.wait_for_function("() => window.MathJax?.startup?.promise")
    page.evaluate("() => MathJax.startup.promise")  # typesetting done
    formulas = page.locator(".math").count()
    assert formulas > 0
    assert page.locator("mjx-container").count() == formulas


def _links_point_at_notebooks(page, name, lang):
    launches = page.eval_on_selector_all(".book-launch", "els => els.map(e => e.href)")
    assert len(launches) == 2
    assert launches[0].startswith("https://colab.research.google.com/github/")
    assert launches[1].startswith("https://studiolab.sagemaker.aws/import/github/")
    for href, fw in zip(launches, ("torch", "mxnet")):
        path = href.split("/blob/", 1)[1].split("/", 1)[1]
        assert path == f"notebooks/{lang}/{fw}/{name}.ipynb"
        assert (ROOT / path).is_file()
    downloads = page.eval_on_selector_all(".book-download", "els => els.map(e => e.href)")
    assert len(downloads) == 2
    for href in downloads:
        response = page.request.get(href)
        assert response.ok and '"nbformat"' in response.text()


def _images_load(page, name, lang):
    page.wait_for_load_state("load")
    sizes = page.eval_on_selector_all(
        "article img", "els => els.map(e => [e.getAttribute('src'), e.naturalWidth])")
    drawing = [fw for fw in ("torch", "mxnet")  # the frameworks whose notebooks have figures
               if _notebook_figure_numbers(lang, name, fw)]
    assert bool(sizes) == bool(drawing), "the page's images and its notebooks' figures differ"
    assert all(width > 0 for _, width in sizes), sizes
    for fw in drawing:  # each of them shows its figures under its tab
        page.locator(f".book-bar .fw-tab[data-fw={fw}]").click()
        visible = page.eval_on_selector_all(
            "article img", "els => els.filter(e => e.getClientRects().length).length")
        assert visible > 0, f"no visible figure for {fw}"


def _footer_names_the_licences(page, name, lang):
    """The footer names the text's and the code's licences, in the page's language, and
    links the repository's licence notes."""
    footer = " ".join(page.locator("footer").all_inner_texts())
    assert "CC BY-SA 4.0" in footer and "MIT" in footer
    assert ("正文与图" if lang == "zh" else "Text and figures") in footer
    links = page.eval_on_selector_all("footer a", "els => els.map(e => e.href)")
    assert any(href.endswith("/LICENSE-TEXT.md") for href in links), links
    assert (ROOT / "LICENSE-TEXT.md").is_file() and (ROOT / "LICENSE").is_file()


#: The outermost elements that stick out past the right edge of the window with no box of
#: their own that scrolls or clips them (what makes a page scroll sideways as a whole).
_STICKING_OUT = """() => {
  const right = document.documentElement.clientWidth + 1;
  const held = e => {
    for (let box = e.parentElement; box && box !== document.body; box = box.parentElement)
      if (getComputedStyle(box).overflowX !== 'visible')
        return box.getBoundingClientRect().right <= right;
    return false;
  };
  const out = [...document.querySelectorAll('body *')].filter(e => {
    const r = e.getBoundingClientRect();
    return r.width > 0 && r.right > right && getComputedStyle(e).position !== 'fixed' && !held(e);
  });
  return out.filter(e => !out.includes(e.parentElement)).slice(0, 10).map(e =>
    `${e.tagName.toLowerCase()}.${[...e.classList].join('.')} to ${Math.round(
      e.getBoundingClientRect().right)} px: ${e.textContent.trim().slice(0, 60)}`);
}"""


def _sideways(page) -> list[str]:
    """[] where the page is no wider than its window, else what sticks out of it."""
    if page.evaluate("() => document.documentElement.scrollWidth"
                     " <= document.documentElement.clientWidth"):
        return []
    return page.evaluate(_STICKING_OUT) or ["the page is wider than the window"]


def _fits_a_phone(page, name, lang):
    """At a phone's width (390 px) the page does not scroll sideways as a whole, under either
    framework's tab: tables and code scroll in their own boxes, long inline code wraps."""
    size = page.viewport_size
    page.set_viewport_size(VIEWPORTS["phone"])
    try:
        for fw in ("torch", "mxnet"):
            page.locator(f".book-bar .fw-tab[data-fw={fw}]").click()
            wide = _sideways(page)
            assert wide == [], f"{fw} tab at {VIEWPORTS['phone']['width']} px: {wide}"
    finally:
        page.set_viewport_size(size)


def _top_groups_follow_the_page_bar(page, name, lang):
    """The run note and the quick answers, right under the page bar's framework tabs, have no
    tab bar of their own (three tab bars on the first screen): the page bar's tabs switch
    them. The page bar's tabs are the only ones above the quick answers' end."""
    assert page.locator(".quick-answers .fw-tabs").count() == 0
    note = page.locator("article h1 + .fw-group")
    assert note.count() == 1 and note.locator(".fw-tabs").count() == 0
    assert "blockquote" in note.inner_html()
    page.evaluate("() => window.scrollTo(0, 0)")
    above = page.evaluate("""() => {
      const end = document.querySelector('.quick-answers').getBoundingClientRect().bottom;
      return [...document.querySelectorAll('.fw-tabs')].filter(bar =>
        bar.getClientRects().length && bar.getBoundingClientRect().top < end).length; }""")
    assert above == 1
    for fw, other in (("mxnet", "torch"), ("torch", "mxnet")):
        page.locator(f".book-bar .fw-tab[data-fw={fw}]").click()
        for box in (".quick-answers", "article h1 + .fw-group"):
            assert all(_visible(page, f"{box} .fw-{fw}")), (box, fw)
            assert not any(_visible(page, f"{box} .fw-{other}")), (box, fw)


#: The checks that every chapter gets, in the order they run on each language's page (the
#: formulas first, on the page as loaded, before any tab is clicked).
GENERIC_CHECKS = {"formulas": _formulas_render, "links": _links_point_at_notebooks,
                  "images": _images_load, "licence": _footer_names_the_licences,
                  "phone width": _fits_a_phone, "top tabs": _top_groups_follow_the_page_bar}


def _switch_language(page, name, lang):
    """Click the language link of the page in ``lang``: it lands on the same chapter in the
    other language."""
    other = {"en": "zh", "zh": "en"}[lang]
    page.locator(".book-lang").click()
    page.wait_for_load_state()
    assert urlparse(page.url).path == f"/{other}/chapters/{name}.html"
    assert page.locator("html").get_attribute("lang").startswith(other)


def _from_the_pytorch_tab(check):
    """``check(page, lang)`` run as a check of the visit, from the PyTorch tab (as on a first
    visit, where the page opens with it)."""
    def run(page, name, lang):
        page.locator(".book-bar .fw-tab[data-fw=torch]").click()
        check(page, lang)
    return run


@dataclass
class Visit:
    """What the visit of chapter ``name`` found: the checks that ran, as (check, language of
    the page), those that failed, with their exception, and the errors of its pages."""

    name: str
    ran: set = field(default_factory=set)
    failures: dict = field(default_factory=dict)
    errors: list = field(default_factory=list)

    def verdict(self, check: str, lang: str) -> None:
        """Raise what ``check`` raised on the page in ``lang``, if anything."""
        assert (check, lang) in self.ran, f"{check} did not run on /{lang}/chapters/{self.name}"
        if (check, lang) in self.failures:
            raise self.failures[check, lang]


def _visit(browser, site_url, name) -> Visit:
    """Load chapter ``name`` in English, switch to Chinese and back, running every check."""
    visit = Visit(name)
    context = browser.new_context()
    page = _watched_page(context)

    def run(check, lang, function):
        visit.ran.add((check, lang))
        try:
            function(page, name, lang)
        except Exception as exc:  # raised again by the check's own test
            if hasattr(exc, "add_note"):  # (Python 3.11)
                exc.add_note(f"(check {check!r} on /{lang}/chapters/{name}.html)")
            visit.failures[check, lang] = exc

    def check_page(lang):
        for check, function in GENERIC_CHECKS.items():
            run(check, lang, function)
        for check, langs in PAGE_CHECKS.get(name, []):
            if lang in langs:
                run(check.__name__, lang, _from_the_pytorch_tab(check))

    def switch(lang):
        # the next page loads as on a first visit: PyTorch's tab remembered
        page.evaluate("() => localStorage.setItem('book-framework', 'torch')")
        run("language switch", lang, _switch_language)
        other = {"en": "zh", "zh": "en"}[lang]
        if urlparse(page.url).path != f"/{other}/chapters/{name}.html":
            page.goto(f"{site_url}/{other}/chapters/{name}.html")  # check that page anyway

    def note_errors():  # each with the page it happened on
        path = urlparse(page.url).path
        visit.errors += [f"{path}: {error}" for error in page.errors[len(visit.errors):]]

    try:
        page.goto(f"{site_url}/en/chapters/{name}.html")
        check_page("en")
        note_errors()
        switch("en")
        check_page("zh")
        note_errors()
        switch("zh")
    finally:
        note_errors()
        context.close()
    return visit


@pytest.fixture(scope="module")
def visits(browser, site_url):
    """``visits(name)``: the visit of chapter ``name``, made on the first call."""
    done: dict[str, Visit | Exception] = {}

    def get(name: str) -> Visit:
        if name not in done:
            try:
                done[name] = _visit(browser, site_url, name)
            except Exception as exc:  # every test of the chapter reports it
                done[name] = exc
        if isinstance(done[name], Exception):
            raise done[name]
        return done[name]

    return get


def page_check(chapter: str, langs: tuple[str, ...] = LANGS):
    """Make ``check(page, lang)`` a check of ``chapter``'s page in each of ``langs``, run
    during the chapter's visit (starting from the PyTorch tab, as on a first visit), and
    return the test that reports it (one per language where there are several)."""
    def register(check):
        PAGE_CHECKS.setdefault(chapter, []).append((check, langs))
        if len(langs) == 1:
            def test(visits):
                visits(chapter).verdict(check.__name__, langs[0])
        else:
            @pytest.mark.parametrize("lang", langs)
            def test(visits, lang):
                visits(chapter).verdict(check.__name__, lang)
        test.__name__ = test.__qualname__ = check.__name__
        test.__doc__ = check.__doc__
        return test
    return register


@pytest.mark.parametrize("name", CHAPTERS)
def test_language_switch_lands_on_the_same_chapter(visits, name):
    visit = visits(name)
    for lang in LANGS:
        visit.verdict("language switch", lang)
    assert visit.errors == []


@pytest.mark.parametrize("name", CHAPTERS)
def test_launch_and_download_links_point_at_existing_notebooks(visits, name):
    visit = visits(name)
    for lang in LANGS:
        visit.verdict("links", lang)


@pytest.mark.parametrize("name", CHAPTERS)
def test_images_load_and_no_console_errors(visits, name):
    visit = visits(name)
    for lang in LANGS:
        visit.verdict("images", lang)
    assert visit.errors == []


@pytest.mark.parametrize("name", CHAPTERS)
def test_footer_names_the_licences(visits, name):
    visit = visits(name)
    for lang in LANGS:
        visit.verdict("licence", lang)


@pytest.mark.parametrize("name", CHAPTERS)
def test_formulas_render_without_internet(visits, name):
    visit = visits(name)
    for lang in LANGS:
        visit.verdict("formulas", lang)
    assert visit.errors == []


@pytest.mark.parametrize("name", CHAPTERS)
def test_no_chapter_scrolls_sideways_on_a_phone(visits, name):
    visit = visits(name)
    for lang in LANGS:
        visit.verdict("phone width", lang)


@pytest.mark.parametrize("name", CHAPTERS)
def test_run_note_and_quick_answers_follow_the_page_bar(visits, name):
    visit = visits(name)
    for lang in LANGS:
        visit.verdict("top tabs", lang)


# ---- Pages of their own ----


def test_root_page_offers_both_languages(page, site_url):
    page.goto(f"{site_url}/index.html")
    hrefs = page.eval_on_selector_all(".lang-choice a", "els => els.map(e => e.href)")
    assert [urlparse(h).path for h in hrefs] == ["/en/index.html", "/zh/index.html"]
    for href in hrefs:
        assert page.request.get(href).ok


def test_root_page_returns_to_the_edition_last_read(page, site_url):
    page.goto(f"{site_url}/zh/chapters/{CHAPTERS[0]}.html")
    page.goto(f"{site_url}/index.html")
    page.wait_for_url(f"{site_url}/zh/index.html")
    page.locator(".book-lang").click()  # switch to English: remembered too
    page.wait_for_load_state()
    page.goto(f"{site_url}/index.html")
    page.wait_for_url(f"{site_url}/en/index.html")
    assert page.errors == []


def test_tabs_switch_every_group_and_are_remembered(page, site_url):
    page.goto(f"{site_url}/en/{PAGE}")
    assert page.locator(".fw-group").count() >= 5
    assert all(_visible(page, ".fw-group > .tag_torch"))
    assert not any(_visible(page, ".fw-group > .tag_mxnet"))
    assert all(_visible(page, ".fw-group > .fw-torch"))  # framework-specific prose

    page.locator(".fw-group .fw-tab[data-fw=mxnet]").nth(2).click()
    assert not any(_visible(page, ".fw-group > .tag_torch"))
    assert all(_visible(page, ".fw-group > .tag_mxnet"))
    assert not any(_visible(page, ".fw-group > .fw-torch"))
    active = page.eval_on_selector_all(".fw-tab.active", "els => els.map(e => e.dataset.fw)")
    assert set(active) == {"mxnet"}

    page.reload()
    assert all(_visible(page, ".fw-group > .tag_mxnet"))
    assert not any(_visible(page, ".fw-group > .tag_torch"))

    page.goto(f"{site_url}/zh/{PAGE}")  # another page remembers it too
    assert all(_visible(page, ".fw-group > .tag_mxnet"))
    assert not any(_visible(page, ".fw-group > .tag_torch"))
    assert page.errors == []


@page_check(Path(PAGE).stem, ("en",))
def test_one_framework_cell_hides_completely(page, lang):
    page.locator(".book-bar .fw-tab[data-fw=mxnet]").click()
    # the set_sync_debug_mode cell exists for PyTorch only (d2l-en #1479)
    cell = page.locator(".tag_torch", has_text="set_sync_debug_mode")
    assert cell.count() == 1
    assert not cell.is_visible()
    assert not page.get_by_text("set_sync_debug_mode(\"warn\")").first.is_visible()
    page.locator(".book-bar .fw-tab[data-fw=torch]").click()
    assert cell.is_visible()


@page_check(Path(PAGE).stem, ("en",))
def test_a_group_without_one_framework_says_so(page, lang):
    groups = page.eval_on_selector_all(
        ".fw-group", "gs => gs.map(g => [g.querySelectorAll('.tag_torch, .fw-torch').length,"
        " g.querySelectorAll('.tag_mxnet, .fw-mxnet').length])")
    # every group offers content or an explicit note for both frameworks
    assert all(t > 0 and m > 0 for t, m in groups)


@page_check(Path(PAGE).stem, ("en",))
def test_page_names_the_machine_of_its_outputs(page, lang):
    note = page.locator(".fw-torch", has_text="real run on").first
    assert note.is_visible()
    assert "PyTorch" in note.inner_text()


# Terms from the chapters' running text (not only headings). 学习率 is the case that
# failed before: Sphinx's Chinese segmenter cuts it into 学习 + 率.
SEARCHES = [("en", "learning rate"), ("en", "barrier"), ("zh", "学习率"), ("zh", "异步"),
            ("zh", "数据加载器"), ("zh", "DistributedDataParallel")]


@pytest.mark.parametrize("lang, term", SEARCHES)
def test_search_finds_in_text_terms(page, site_url, lang, term):
    page.goto(f"{site_url}/{lang}/search.html?q={quote(term)}")
    hits = page.locator("#search-results ul.search li")
    hits.first.wait_for(timeout=20_000)
    links = [urlparse(h).path for h in page.eval_on_selector_all(
        "#search-results ul.search li a", "els => els.map(e => e.href)")]
    assert any(f"/{lang}/chapters/" in link for link in links), links
    assert page.errors == []


def test_search_for_an_absent_term_finds_nothing(page, site_url):
    page.goto(f"{site_url}/zh/search.html?q={quote('量子纠缠')}")
    page.wait_for_function(
        "() => document.querySelector('#search-results')?.textContent.length > 0")
    assert page.locator("#search-results ul.search li").count() == 0


@page_check("multi-gpu-concise")
def test_multi_gpu_page_shows_the_ddp_loop_under_the_pytorch_tab(page, lang):
    page.locator(".book-bar .fw-tab[data-fw=torch]").click()
    script = page.locator(".tag_torch", has_text="%%writefile train_ddp.py")
    assert script.is_visible()
    for call in ("init_process_group", "DistributedDataParallel(net", "sampler.set_epoch(epoch)",
                 "dist.all_reduce"):
        assert call in script.inner_text()
    page.locator(".book-bar .fw-tab[data-fw=mxnet]").click()
    assert not script.is_visible()
    assert page.errors == []


@page_check("tuning-tips-ladder")
def test_tuning_page_shows_each_framework_its_own_ladder(page, lang):
    """The speed ladder's code, table and chart sit under the PyTorch tab; MXNet's shorter
    ladder under the MXNet tab; each hides when the other framework is chosen."""
    page.locator(".book-bar .fw-tab[data-fw=torch]").click()
    torch_ladder = page.locator(".tag_torch", has_text="ladder.run(rungs")
    torch_table = page.locator(".tag_torch", has_text="d2l.show(ladder.table(results")
    torch_chart = page.locator(".tag_torch", has_text="ladder.plot(results)")
    mxnet_ladder = page.locator(".tag_mxnet", has_text="mx_rungs = [")
    assert torch_ladder.is_visible() and not mxnet_ladder.is_visible()
    header = {"en": "time ÷ previous", "zh": "用时 ÷ 前一台阶"}[lang]
    assert header in torch_table.inner_text()  # the run
    assert torch_table.locator("table.d2l-table").count() == 2  # times, then analysis
    assert torch_chart.locator("img").count() >= 1  # the bar chart
    page.locator(".book-bar .fw-tab[data-fw=mxnet]").click()
    assert mxnet_ladder.is_visible() and not torch_ladder.is_visible()
    assert page.errors == []


@page_check("host-device-sync")
def test_sync_page_shows_each_framework_its_losses_and_timeline(page, lang):
    page.locator(".book-bar .fw-tab[data-fw=torch]").click()
    fix = page.locator(".tag_torch", has_text="def loss_ignore_index")
    timeline = page.locator(
        ".tag_torch", has_text="empty_rows = {\"original\": sync_profile.draw_last_step(")
    mx_loss = page.locator(".tag_mxnet", has_text="def loss_no_blocking")
    assert fix.is_visible() and timeline.is_visible() and not mx_loss.is_visible()
    assert timeline.locator("img").count() == 1  # the timeline drawn from the trace
    # the table of synchronisations, one cell with each framework's output from its run
    counts = page.locator(".tag_torch", has_text="LOSS = d2l.say(")
    mx_counts = page.locator(".tag_mxnet", has_text="LOSS = d2l.say(")
    assert "ignore_index" in counts.inner_text() and not mx_counts.is_visible()  # from the run
    table = counts.locator(".cell_output").inner_text()  # in the reader's language
    assert ("每步同步次数" in table) == (lang == "zh") and ("syncs/step" in table) == (lang == "en")
    page.locator(".book-bar .fw-tab[data-fw=mxnet]").click()
    assert mx_loss.is_visible() and not fix.is_visible()
    assert "no_blocking" in mx_counts.inner_text() and not counts.is_visible()
    assert page.errors == []


def _with_next(cell) -> str:
    """The text a reader sees in a code cell and in the cell right after it (a computation
    and its collapsed presentation: the output is in the second)."""
    following = cell.locator("xpath=following-sibling::div[contains(@class, 'cell')][1]")
    return cell.inner_text() + "\n" + following.inner_text()


@page_check("gpu-basics-streams")
def test_gpu_basics_streams_page_shows_each_framework_its_data_parallel(page, lang):
    """PyTorch's four primitives and the Hogwild script under the PyTorch tab; Gluon's
    split_and_load version under the MXNet tab; the page's check tables from the run, in the
    page's language."""
    page.locator(".book-bar .fw-tab[data-fw=torch]").click()
    primitives = page.locator(".tag_torch", has_text="def data_parallel(module, inputs")
    check = page.locator(".tag_torch", has_text="one_device = outputs_and_grads(lenet)")
    hogwild = page.locator(".tag_torch", has_text="%%writefile hogwild.py")
    mx_version = page.locator(".tag_mxnet", has_text="gluon.utils.split_and_load(X, devices)")
    torch_check = page.locator(".tag_torch", has_text="makes_it_right = None")
    mx_check = page.locator(".tag_mxnet", has_text="makes_it_wrong = None")
    assert primitives.is_visible() and hogwild.is_visible() and not mx_version.is_visible()
    assert torch_check.is_visible() and not mx_check.is_visible()
    # the table, from the run, in the page's language
    assert {"en": "vs one device", "zh": "与单设备相比"}[lang] in _with_next(check)
    page.locator(".book-bar .fw-tab[data-fw=mxnet]").click()
    assert mx_version.is_visible() and not primitives.is_visible()
    assert mx_check.is_visible() and not torch_check.is_visible()  # each its own exercises
    assert page.errors == []


@page_check("communication")
def test_communication_page_shows_each_framework_its_own_messages(page, lang):
    """The hand-written all-reduces (send/recv) and the comparison with dist.all_reduce under
    the PyTorch tab; a real parameter-server job (dist_sync KVStore) under the MXNet tab; the
    run's checks in the page's language."""
    page.locator(".book-bar .fw-tab[data-fw=torch]").click()
    ring = page.locator(".tag_torch", has_text="def ring_all_reduce(x, via=dist):")
    check = page.locator(".tag_torch",
                         has_text="checked = {k: comm.spawn(comm_lab.check_all_reduces")
    server_job = page.locator(".tag_mxnet", has_text="%%writefile ps_hello.py")
    assert ring.is_visible() and check.is_visible() and not server_job.is_visible()
    assert {"en": "ring yes, server yes", "zh": "环形算法：是；服务器式：是"}[lang] in \
        _with_next(check)
    page.locator(".book-bar .fw-tab[data-fw=mxnet]").click()
    assert server_job.is_visible() and not ring.is_visible()
    assert page.errors == []


@page_check("transformers-attention")
def test_attention_page_shows_each_framework_its_own_tiles(page, lang):
    """Each tab shows its own tiled attention and its tables; SDPA's backends and
    FlexAttention appear under the PyTorch tab only."""
    page.locator(".book-bar .fw-tab[data-fw=torch]").click()
    torch_tiles = page.locator(".tag_torch", has_text="m = torch.full((*qi.shape[:-1], 1)")
    backends = page.locator(".tag_torch", has_text="chosen[name] = attention.sdpa_backend(")
    mxnet_tiles = page.locator(".tag_mxnet", has_text="m = np.full((*qi.shape[:-1], 1)")
    assert torch_tiles.is_visible() and backends.is_visible() and not mxnet_tiles.is_visible()
    header = {"en": "backend", "zh": "后端"}[lang]
    assert header in _with_next(backends)
    page.locator(".book-bar .fw-tab[data-fw=mxnet]").click()
    assert mxnet_tiles.is_visible() and not torch_tiles.is_visible()
    assert not backends.is_visible()
    assert page.errors == []


@page_check("transformers-kernels")
def test_kernels_page_shows_triton_under_pytorch_and_fusion_under_mxnet(page, lang):
    """The PyTorch tab shows the Triton kernels and their counted bytes; the MXNet tab shows
    oneDNN's fused graph and no Triton."""
    page.locator(".book-bar .fw-tab[data-fw=torch]").click()
    softmax = page.locator(".tag_torch", has_text="def softmax_kernel(out_ptr, in_ptr")
    fusion = page.locator(".tag_mxnet", has_text='fused.optimize_for(x, backend="MKLDNN",')
    assert softmax.is_visible() and not fusion.is_visible()
    assert {"en": "fused kernel (Triton)", "zh": "融合核函数（Triton）"}[lang] in \
        _with_next(softmax)
    page.locator(".book-bar .fw-tab[data-fw=mxnet]").click()
    assert fusion.is_visible() and not softmax.is_visible()
    assert "_sg_mkldnn_fully_connected" in _with_next(fusion)
    assert page.errors == []


@page_check("transformers-precision")
def test_precision_page_shows_fp8_under_pytorch_and_amp_cast_under_mxnet(page, lang):
    """The PyTorch tab measures FP8 scaling and the FP8 product; the MXNet tab measures
    float16 and bfloat16 through amp_cast, with no FP8; the formats table is in the page's
    language."""
    page.locator(".book-bar .fw-tab[data-fw=torch]").click()
    fp8 = page.locator(".tag_torch", has_text="precision.fp8_matmul(a, b, torch.float8_e4m3fn")
    amp_cast = page.locator(".tag_mxnet", has_text="mx.nd.amp_cast(mx.nd.amp_cast(values")
    assert fp8.is_visible() and not amp_cast.is_visible()
    assert "torch._scaled_mm" in _with_next(fp8)
    page.locator(".book-bar .fw-tab[data-fw=mxnet]").click()
    assert amp_cast.is_visible() and not fp8.is_visible()
    assert {"en": "smallest subnormal", "zh": "最小非规格化数"}[lang] in page.content()
    assert page.errors == []


@page_check("parallelism")
def test_parallelism_page_splits_by_processes_under_pytorch_and_by_contexts_under_mxnet(page, lang):
    """The PyTorch tab splits the MLP by hand in processes and counts what each keeps; the
    MXNet tab splits it across contexts with the kvstore as the all-reduce, and shows no
    parallelize_module."""
    page.locator(".book-bar .fw-tab[data-fw=torch]").click()
    by_hand = page.locator(".tag_torch", has_text="def mlp_forward_by_hand(mlp, x, rank,")
    dtensor = page.locator(".tag_torch", has_text="parallelize_module(mlp, mesh,")
    contexts = page.locator(".tag_mxnet", has_text="ys = [y + b2.copyto(y.ctx) for y in group")
    assert by_hand.is_visible() and dtensor.is_visible() and not contexts.is_visible()
    assert {"en": "with sequence parallelism, per process",
            "zh": "加上序列并行，每个进程"}[lang] in page.content()
    page.locator(".book-bar .fw-tab[data-fw=mxnet]").click()
    assert contexts.is_visible() and not by_hand.is_visible() and not dtensor.is_visible()
    kv_table = page.locator(".tag_mxnet", has_text="formula = block_all_reduce_bytes(batch")
    assert {"en": "all-reduce (kvstore sum)", "zh": "全归约（kvstore 求和）"}[lang] in \
        kv_table.inner_text()
    assert page.errors == []


@page_check("parallelism-pipeline")
def test_pipeline_page_runs_torch_s_schedules_and_mxnet_s_contexts(page, lang):
    """The PyTorch tab runs GPipe and 1F1B with torch.distributed.pipelining and draws the
    measured timeline; the MXNet tab cuts the model across contexts; both show the simulated
    schedules' table in the page's language."""
    page.locator(".book-bar .fw-tab[data-fw=torch]").click()
    stages = page.locator(".tag_torch", has_text="schedules = {name: make(PipelineStage(timed,")
    contexts = page.locator(".tag_mxnet", has_text="return halves[1](halves[0](x).copyto(")
    assert stages.is_visible() and not contexts.is_visible()
    assert {"en": "micro-batches held by stage 0, at most",
            "zh": "阶段 0 最多保存的微批量数"}[lang] in page.content()
    page.locator(".book-bar .fw-tab[data-fw=mxnet]").click()
    assert contexts.is_visible() and not stages.is_visible()
    assert page.errors == []


@page_check("parallelism-context-expert")
def test_context_expert_page_runs_processes_under_pytorch_and_contexts_under_mxnet(page, lang):
    """The PyTorch tab writes ring attention by hand and splits the experts among processes;
    the MXNet tab runs both across contexts; both show the load table and the zigzag figure
    in the page's language."""
    page.locator(".book-bar .fw-tab[data-fw=torch]").click()
    ring = page.locator(".tag_torch", has_text="def ring_attention_by_hand(q, k, v):")
    contexts = page.locator(".tag_mxnet", has_text="outs, load, moved = epm.moe_split(")
    assert ring.is_visible() and not contexts.is_visible()
    assert {"en": "dropped at capacity 1.25", "zh": "容量因子 1.25 时丢弃的比例"}[lang] in \
        page.content()
    assert page.locator("#fig-parallelism-zigzag").count() == 1
    page.locator(".book-bar .fw-tab[data-fw=mxnet]").click()
    assert contexts.is_visible() and not ring.is_visible()
    assert {"en": "busiest context / mean", "zh": "最忙的上下文 / 平均"}[lang] in page.content()
    assert page.errors == []


#: Models and splits on which the page's calculator must agree with d2l_ext.planner.plan:
#: dense and mixture-of-experts, GELU and SwiGLU, tied or not, every schedule (1F1B with
#: fewer micro-batches than stages too), every ZeRO stage and recomputation, links inside
#: and across nodes, three GPUs.
_LLAMA_8B, _LLAMA_70B, _GPT3, _MIXTRAL = (
    planner_widget.PRESETS[name] for name in ("Llama 3.1 8B", "Llama 3.1 70B", "GPT-3 175B",
                                              "Mixtral 8x7B"))
_ODD = dict(layers=6, hidden=960, heads=12, kv_heads=4, ffn=2500, vocab=1001, mlp="gelu",
            tied=False, experts=4, top_k=1, dropout=True, flash=False)
_SPLIT = dict(dp=1, zero=0, tp=1, sp=False, pp=1, micro_batch=1, micro_batches=1,
              schedule="1f1b", chunks=1, cp=1, ep=1, recompute="none")
PLANNER_GRID = [
    (_LLAMA_8B, dict(dp=8, zero=3, micro_batch=2, recompute="selective"), 8192, "H100 SXM", 0.4),
    (_LLAMA_8B, dict(dp=128, zero=3, cp=1, recompute="full"), 32768, "H200 SXM", 0.34),
    (_LLAMA_8B, dict(dp=16, zero=2, tp=4, sp=True, micro_batches=16), 8192, "H100 SXM", 0.4),
    (_LLAMA_70B, dict(dp=2, zero=1, tp=8, sp=True, pp=4, schedule="gpipe", micro_batches=8,
                      recompute="full"), 8192, "H100 SXM", 0.5),
    (_LLAMA_70B, dict(dp=2, zero=1, tp=8, sp=True, pp=4, schedule="interleaved", chunks=2,
                      micro_batches=8, cp=2), 16384, "H100 SXM", 0.45),
    (_GPT3, dict(dp=4, zero=2, tp=8, pp=8, micro_batches=16), 2048, "A100 SXM 80GB", 0.5),
    (_GPT3, dict(dp=1, tp=4, sp=True, pp=4, micro_batches=4, recompute="selective"), 2048,
     "A100 SXM 80GB", 0.3),
    (_MIXTRAL, dict(dp=8, zero=1, ep=8, tp=2, sp=True, recompute="selective"), 4096,
     "H100 SXM", 0.4),
    (_ODD, dict(dp=3, zero=3, tp=4, pp=3, micro_batches=2, cp=4, recompute="full",
                micro_batch=3), 4096, "A100 SXM 80GB", 0.55),
    (_ODD, dict(dp=4, ep=2, tp=2, pp=2, schedule="interleaved", chunks=3, micro_batches=4),
     600, "H200 SXM", 0.9),
]


def _calculator_reads(page, values: dict) -> dict:
    """Set every field of the page's calculator to ``values`` and read what it shows: each
    part's raw number (bytes or seconds), the refusal if any, and the verdict."""
    return page.evaluate("""(values) => {
        const root = document.querySelector('.planner-calculator');
        const form = root.querySelector('form');
        for (const [name, value] of Object.entries(values)) {
            const field = form.querySelector(`[name=${name}]`);
            if (field.type === 'checkbox') field.checked = value; else field.value = String(value);
        }
        form.dispatchEvent(new Event('change'));
        const parts = {};
        root.querySelectorAll('.planner-result [data-key]').forEach(
            (cell) => { parts[cell.dataset.key] = Number(cell.dataset.value); });
        const error = root.querySelector('.planner-error');
        const verdict = root.querySelector('.planner-verdict');
        return {parts, error: error && error.textContent,
                fits: verdict && verdict.dataset.fits === 'true',
                verdict: verdict && verdict.textContent};
    }""", values)


@page_check("parallelism-planner")
def test_planner_calculator_gives_what_the_python_planner_gives(page, lang):
    """The calculator in the page computes, for every model and split of a grid, the same
    memory and time parts as d2l_ext.planner.plan, refuses what plan refuses in the page's
    language, and says whether the plan fits."""
    from d2l_ext import planner

    calculator = page.locator(".planner-calculator")
    assert calculator.count() == 1 and calculator.get_attribute("data-ready") == "true"
    for row, (model, split, seq, gpu, efficiency) in enumerate(PLANNER_GRID):
        headroom = (0.0, 0.25, 0.5)[row % 3]
        values = dict(model, **dict(_SPLIT, **split), seq=seq, hardware=gpu,
                      efficiency=efficiency, headroom=headroom)
        shown = _calculator_reads(page, values)
        assert shown["error"] is None, (values, shown["error"])
        want = planner.plan(
            planner.Model(**model), planner.Split(**dict(_SPLIT, **split)), seq,
            planner.HARDWARE[gpu], efficiency)
        expected = {**want.memory, **want.time, "total": want.total_memory,
                    "step": want.step_time}
        assert shown["parts"] == pytest.approx(expected, rel=1e-9), values
        fits = want.total_memory <= planner.HARDWARE[gpu].memory * (1 - headroom)
        assert shown["fits"] == fits
        assert ({"en": "Fits", "zh": "放得下"} if fits else
                {"en": "Does not fit", "zh": "放不下"})[lang] in shown["verdict"]
    refused = _calculator_reads(page, dict(_LLAMA_70B, **dict(_SPLIT, tp=3), seq=8192,
                                           hardware="H100 SXM", efficiency=0.4, headroom=0))
    assert refused["error"] == {"en": "tp (3) must divide the heads (64) and the key/value "
                                      "heads (8).",
                                "zh": "tp（3）必须整除头数（64）和键值头数（8）。"}[lang]
    with pytest.raises(ValueError, match=r"tp \(3\) must divide the heads \(64\)"):
        planner.plan(planner.Model(**_LLAMA_70B), planner.Split(tp=3), 8192)
    refused = _calculator_reads(page, dict(_LLAMA_70B, **dict(_SPLIT, pp=3), seq=8192,
                                           hardware="H100 SXM", efficiency=0.4, headroom=0))
    assert "80" in refused["error"] and "3" in refused["error"]
    page.select_option(".planner-calculator select[name=preset]", "Llama 3.1 405B")
    assert page.locator(".planner-calculator input[name=layers]").input_value() == "126"
    assert page.errors == []


@page_check("memory")
def test_memory_page_shows_each_framework_its_own_counter(page, lang):
    """The PyTorch tab counts with d2l_ext.memory's Tracker and checkpoints the deep MLP; the
    MXNet tab counts with the profiler's storage counter; the counting table from the run is
    in the page's language."""
    page.locator(".book-bar .fw-tab[data-fw=torch]").click()
    counting = page.locator(".tag_torch", has_text="with memory.Tracker(device) as tracker:")
    sharding = page.locator(".tag_torch", has_text="def deep_step(segments):")
    mx_counter = page.locator(".tag_mxnet", has_text="counter = mxnet_memory.StorageCounter()")
    assert counting.is_visible() and sharding.is_visible() and not mx_counter.is_visible()
    assert {"en": "measured \u2212 predicted, bytes", "zh": "实测 \u2212 预测（字节）"}[lang] in \
        _with_next(counting)
    page.locator(".book-bar .fw-tab[data-fw=mxnet]").click()
    assert mx_counter.is_visible() and not counting.is_visible()
    assert page.errors == []


# ---- What every page offers readers, search engines and link previews (issue #31, item 7) ----

CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
#: The repository and the site's address, each set once in _config.yml.
REPOSITORY = CONFIG["repository"]["url"].rstrip("/")
SITE_ADDRESS = CONFIG.get("html", {}).get("baseurl", "").rstrip("/")
#: Every page of an edition: the landing page, the chapters and the search page.
PAGES = ["index.html", *[f"chapters/{name}.html" for name in CHAPTERS], "search.html"]
CONTENT_PAGES = PAGES[:-1]
VIEWPORTS = {"desktop": {"width": 1280, "height": 800}, "phone": {"width": 390, "height": 844}}
REPORT_TEXT = {"en": "Report a problem with this page", "zh": "报告本页的问题"}
OG_LOCALE = {"en": "en_US", "zh": "zh_CN"}


def _html(lang: str, path: str):
    """The built page ``path`` of edition ``lang``, parsed."""
    bs4 = pytest.importorskip("bs4", reason="the book tools need the full environment")
    return bs4.BeautifulSoup((SITE / lang / path).read_text(encoding="utf-8"), "html.parser")


def _address(lang: str, path: str) -> str:
    return f"{SITE_ADDRESS}/{lang}/{path}"


def _local(url: str) -> Path:
    """The file of the built site that the site's address ``url`` serves."""
    assert url.startswith(SITE_ADDRESS + "/"), url
    return SITE / url[len(SITE_ADDRESS) + 1:]


def _section_ids(lang: str, path: str) -> list[str]:
    return [s["id"] for s in _html(lang, path).select("article section[id]")]


@pytest.fixture
def phone_or_desktop(browser, request):
    """A watched page in a new context of the viewport ``request.param`` names."""
    context = browser.new_context(viewport=VIEWPORTS[request.param],
                                  is_mobile=request.param == "phone",
                                  has_touch=request.param == "phone")
    yield _watched_page(context)
    context.close()


def test_site_address_is_set_once():
    assert SITE_ADDRESS.startswith("https://"), "html.baseurl in _config.yml"
    assert REPOSITORY.startswith("https://github.com/")


#: Interface words of the themes that a Simplified Chinese page must not show.
NOT_ZH_UI = ("列印", "Search this book", "Color mode", "System Settings", "Copyright",
             "Toggle primary sidebar", "Toggle secondary sidebar", "Show code cell")


@pytest.mark.parametrize("path", PAGES)
def test_chinese_pages_speak_simplified_chinese_in_the_interface(site_url, path):
    """The themes' words on a zh page (everything but the article): 打印 (not the
    Traditional 列印), the search box's placeholder, the author line, the colour switch and
    the copyright line in Chinese."""
    page = _html("zh", path)
    assert "列印" not in str(page) and "Show code cell" not in str(page)  # collapsed cells too
    for article in page.select("article"):
        article.decompose()
    assert [word for word in NOT_ZH_UI if word in str(page)] == []
    boxes = page.select("input[name=q]")
    assert boxes and all(box["placeholder"].startswith("搜索") for box in boxes)
    author = CONFIG["author_by_language"]["zh"]
    assert page.select_one(".component-author").get_text(strip=True) == f"作者：{author}"
    prints = page.select("button.btn-download-pdf-button")
    assert all(button["title"] == "打印 / 另存为 PDF" for button in prints)  # as book.js labels it
    assert prints or path == "search.html"  # every page but the search page can be printed
    english = ('title="Link to this heading"', 'title="Link to this image"',
               'aria-label="Toggle hidden content"', 'aria-label="Main"', 'aria-label="Page"')
    assert [label for label in english if label in str(_html("zh", path))] == []
    assert len(_html("zh", path).head.find_all("meta", attrs={"name": "viewport"})) == 1


@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.parametrize("path", PAGES)
def test_every_page_links_a_prefilled_problem_report(site_url, lang, path):
    """The footer of every page links a new issue in the repository, in the page's language,
    its title naming the page and its text giving the page's address."""
    page = _html(lang, path)
    links = page.select("footer .book-report a")
    assert len(links) == 1
    assert links[0].get_text(strip=True) == REPORT_TEXT[lang]
    url = urlparse(links[0]["href"])
    assert f"{url.scheme}://{url.netloc}{url.path}" == f"{REPOSITORY}/issues/new"
    query = parse_qs(url.query)
    title = page.find("meta", property="og:title")["content"]
    assert title and title in query["title"][0]
    assert ("页面问题" in query["title"][0]) == (lang == "zh")
    assert _address(lang, path) in query["body"][0]


@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.parametrize("path", CONTENT_PAGES)
def test_page_head_describes_the_page_and_links_its_editions(site_url, lang, path):
    """Meta description (the first paragraph, without LaTeX or code), OpenGraph, canonical
    address and hreflang alternates between the two editions."""
    page = _html(lang, path)
    head = page.head
    description = head.find("meta", attrs={"name": "description"})["content"]
    assert len(description) > 40
    for mark in ("\\", "$", "`", "\0", "{", "}", ">>>"):
        assert mark not in description, (mark, description)
    words = description.rstrip("…").split()[:4] if lang == "en" else [description[:12]]
    text = " ".join(page.select_one("article").get_text().split())
    assert all(word in text for word in words), (words, description)

    def og(name):
        return head.find("meta", property=f"og:{name}")["content"]

    assert og("description") == description
    assert og("title") and og("title") in page.select_one("article h1").get_text()
    assert og("type") == ("website" if path == "index.html" else "article")
    assert og("locale") == OG_LOCALE[lang]
    assert og("url") == _address(lang, path)
    assert head.find("link", rel="canonical")["href"] == _address(lang, path)
    alternates = {link["hreflang"]: link["href"] for link in
                  head.find_all("link", rel="alternate", hreflang=True)}
    assert alternates == {"en": _address("en", path), "zh-Hans": _address("zh", path),
                          "x-default": _address("en", path)}
    assert all(_local(url).is_file() for url in alternates.values())


@pytest.mark.parametrize("name", ["index", *CHAPTERS])
def test_both_editions_share_their_section_ids(site_url, name):
    """Each Chinese section has the id of the English section at its place (not #id2...)."""
    path = "index.html" if name == "index" else f"chapters/{name}.html"
    en, zh = _section_ids("en", path), _section_ids("zh", path)
    assert en and zh == en
    assert not [i for i in zh if i.startswith("id") and i[2:].isdigit()]
    # the page's own table of contents links them
    toc = [a["href"] for a in _html("zh", path).select(".bd-toc a[href^='#']")]
    assert (toc or name == "index") and all(href[1:] in en for href in toc), toc


def _book_sections():
    sys.path.insert(0, str(ROOT / "tools" / "sphinx_ext"))
    import book_sections
    return book_sections


def test_editions_with_different_headings_stop_the_build_naming_the_heading():
    sections = _book_sections()
    H = sections.Heading
    en = [H(0, "Memory", "memory"), H(1, "Counting", "counting"), H(1, "Summary", "summary")]
    zh = [H(0, "内存", "id1"), H(1, "计数", "id2"), H(1, "小结", "id3")]
    assert sections.shared_ids("chapters/memory", zh, en, "zh", "en") == [
        "memory", "counting", "summary"]
    with pytest.raises(sections.HeadingMismatch, match=r"chapters/memory.*'计数'.*'Counting'"):
        sections.shared_ids("chapters/memory", [zh[0], H(2, "计数", "id2"), zh[2]], en,
                            "zh", "en")
    with pytest.raises(sections.HeadingMismatch, match=r"chapters/memory.*'小结'.*zh edition"):
        sections.shared_ids("chapters/memory", [*zh, H(1, "小结", "id4")], en, "zh", "en")
    with pytest.raises(sections.HeadingMismatch, match=r"'Summary' in the en edition"):
        sections.shared_ids("chapters/memory", zh[:2], en, "zh", "en")


def test_renamed_sections_keep_their_labels_and_references():
    from docutils import nodes
    from docutils.core import publish_doctree

    sections = _book_sections()
    document = publish_doctree(
        ".. _sec-label:\n\n标题\n====\n\n见 `小节`_。\n\n小节\n----\n\n文字。\n",
        settings_overrides={"doctitle_xform": False, "report_level": 5})
    found, headings = sections.headings(document)
    assert [h.level for h in headings] == [0, 1]
    old = [h.id for h in headings]
    sections.rename_sections(document, found, ["title", "part"])
    assert found[0]["ids"][0] == "title" and "sec-label" in found[0]["ids"]
    assert document.ids["part"] is found[1] and not set(old) & set(document.ids)
    assert document.nameids["小节"] == "part" and document.nameids["sec-label"] == "sec-label"
    refs = [node for node in document.findall(nodes.reference) if node.get("refid")]
    assert [ref["refid"] for ref in refs] == ["part"]


@pytest.mark.parametrize("phone_or_desktop", VIEWPORTS, indirect=True)
@pytest.mark.parametrize("lang", LANGS)
def test_language_switch_keeps_the_section(phone_or_desktop, site_url, lang):
    """Switching language at a section lands on the same section of the other edition, also
    after the reader moved to it within the page."""
    page, other, name = phone_or_desktop, {"en": "zh", "zh": "en"}[lang], CHAPTERS[0]
    path = f"chapters/{name}.html"
    ids = _section_ids(lang, path)
    page.goto(f"{site_url}/{lang}/{path}#{ids[2]}")
    _click_language_switch(page)
    page.wait_for_url(f"{site_url}/{other}/{path}#{ids[2]}")
    assert page.locator(f"section#{ids[2]}").count() == 1
    page.evaluate(f"() => {{ location.hash = '#{ids[-1]}'; }}")  # moved within the page
    _click_language_switch(page)
    page.wait_for_url(f"{site_url}/{lang}/{path}#{ids[-1]}")
    assert page.locator(f"section#{ids[-1]}").count() == 1
    assert page.errors == []


def _click_language_switch(page):
    """Click the language switch where it is, as a reader does: the header holding it stays
    at the top of the window, and Playwright's own click would scroll the page first."""
    box = page.locator(".book-lang").bounding_box()
    assert box and box["y"] >= 0 and box["y"] + box["height"] <= page.viewport_size["height"]
    page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)


@pytest.mark.parametrize("phone_or_desktop", VIEWPORTS, indirect=True)
@pytest.mark.parametrize("lang", LANGS)
def test_language_switch_lands_on_the_section_being_read(phone_or_desktop, site_url, lang):
    """A reader who scrolled to a section (no #anchor in the address) and switches language
    there, with the switch that stays in view, lands on that section of the other edition;
    at the top of a page the switch opens the other page at its top; on the search page it
    keeps the query."""
    page, other = phone_or_desktop, {"en": "zh", "zh": "en"}[lang]
    name = "host-device-sync-measuring"
    path = f"chapters/{name}.html"
    ids = _section_ids(lang, path)
    page.goto(f"{site_url}/{lang}/{path}")
    page.wait_for_load_state("load")
    page.evaluate("() => localStorage.setItem('book-framework', 'torch')")
    page.evaluate(f"() => document.getElementById('{ids[3]}').scrollIntoView()")
    page.wait_for_timeout(200)
    _click_language_switch(page)
    page.wait_for_url(f"{site_url}/{other}/{path}#{ids[3]}")
    page.wait_for_load_state("load")
    page.wait_for_function(IN_VIEW, arg=ids[3], timeout=10_000)
    page.evaluate("() => window.scrollTo(0, 0)")
    page.wait_for_timeout(200)
    _click_language_switch(page)
    page.wait_for_url(f"{site_url}/{lang}/{path}")
    page.goto(f"{site_url}/{lang}/search.html?q=ring")
    _click_language_switch(page)
    page.wait_for_url(f"{site_url}/{other}/search.html?q=ring")
    assert page.errors == []


#: Old links to sections that moved to a section page when their chapter was split:
#: (edition, the page the link names, the section, the page that has it now).
MOVED = [("en", "tuning-tips", "sec-tuning-tips-amp", "tuning-tips-switches"),
         ("zh", "tuning-tips", "sec-tuning-tips-amp", "tuning-tips-switches"),
         ("en", "memory", "sec-memory-oom", "memory-oom"),
         ("zh", "memory", "sec-memory-oom", "memory-oom")]
IN_VIEW = """id => { const box = document.getElementById(id).getBoundingClientRect();
    return box.top >= 0 && box.top < window.innerHeight; }"""


@pytest.mark.parametrize("lang, old, anchor, new", MOVED)
def test_a_link_to_a_moved_section_lands_on_its_new_page(page, site_url, lang, old, anchor,
                                                         new):
    """An old link to a section of a split chapter lands on the section page that has the
    section, in the same edition, with the section in view (book.js, book-anchors.js)."""
    page.goto(f"{site_url}/{lang}/chapters/{old}.html#{anchor}")
    page.wait_for_url(f"{site_url}/{lang}/chapters/{new}.html#{anchor}")
    page.wait_for_load_state("load")
    page.wait_for_function(IN_VIEW, arg=anchor, timeout=10_000)
    assert page.errors == []


def test_a_moved_section_is_followed_within_a_page_and_an_unknown_id_stays(page, site_url):
    """Following a link within a page (the hash changes) to a section on another page goes
    there; an id that no page has, or that this page has, leaves the page as it is."""
    start = f"{site_url}/en/chapters/tuning-tips.html"
    page.goto(f"{start}#no-such-section")
    page.wait_for_load_state("load")
    page.evaluate("() => { location.hash = '#sec-tuning-tips'; }")  # on this page
    page.wait_for_timeout(300)
    assert page.url == f"{start}#sec-tuning-tips"
    page.evaluate("() => { location.hash = '#sec-memory-oom'; }")
    page.wait_for_url(f"{site_url}/en/chapters/memory-oom.html#sec-memory-oom")
    assert page.errors == []


@pytest.mark.parametrize("lang", LANGS)
def test_every_label_in_the_anchor_map_is_on_its_page(site_url, lang):
    """The map book.js follows (``_static/book-anchors.js``) names, for each label, a page
    of the edition that has an element with that id."""
    script = (SITE / lang / "_static" / "book-anchors.js").read_text(encoding="utf-8")
    pages = json.loads(re.search(r"window\.BOOK_ANCHORS = (\{.*\});", script)[1])
    assert "sec-tuning-tips-amp" in pages
    parsed = {path: _html(lang, f"{path}.html") for path in set(pages.values())}
    missing = [(i, path) for i, path in pages.items() if parsed[path].find(id=i) is None]
    assert missing == []


@pytest.mark.parametrize("phone_or_desktop", VIEWPORTS, indirect=True)
@pytest.mark.parametrize("lang", LANGS)
def test_framework_bar_only_on_pages_with_code(phone_or_desktop, site_url, lang):
    """The landing and search pages show the language switch and no framework tabs; a chapter
    shows both. A first visit (no saved theme mode) logs no error: the theme's is gone."""
    page = phone_or_desktop
    for path in ("index.html", "search.html"):
        page.goto(f"{site_url}/{lang}/{path}")
        page.wait_for_load_state("load")
        assert page.locator(".bd-header-article .book-lang").is_visible()
        assert page.locator(".fw-tabs, .fw-tab").count() == 0
    page.goto(f"{site_url}/{lang}/chapters/{CHAPTERS[0]}.html")
    page.wait_for_load_state("load")
    assert sum(_visible(page, ".book-bar .fw-tab")) == 2
    assert page.errors == []


@pytest.mark.parametrize("phone_or_desktop", VIEWPORTS, indirect=True)
@pytest.mark.parametrize("lang", LANGS)
def test_problem_report_link_shows_in_the_page_language(phone_or_desktop, site_url, lang):
    page = phone_or_desktop
    page.goto(f"{site_url}/{lang}/chapters/{CHAPTERS[-1]}.html")
    link = page.locator(".book-report a")
    link.scroll_into_view_if_needed()
    assert link.is_visible() and link.inner_text() == REPORT_TEXT[lang]
    box = link.bounding_box()
    assert box["x"] >= 0 and box["x"] + box["width"] <= VIEWPORTS[
        "phone" if page.viewport_size["width"] < 500 else "desktop"]["width"]
    assert link.get_attribute("href").startswith(f"{REPOSITORY}/issues/new?title=")
    assert page.errors == []


@pytest.mark.parametrize("phone_or_desktop", ["phone"], indirect=True)
@pytest.mark.parametrize("lang", LANGS)
def test_landing_and_search_pages_do_not_scroll_sideways_on_a_phone(phone_or_desktop, site_url,
                                                                    lang):
    """The pages that are not chapters (those are checked in their visit) fit a phone's
    width, the search page with its results shown."""
    page = phone_or_desktop
    page.goto(f"{site_url}/{lang}/index.html")
    page.wait_for_load_state("load")
    assert _sideways(page) == []
    page.goto(f"{site_url}/{lang}/search.html?q=torch")
    page.wait_for_function(  # the search finished, its snippets shown
        "() => document.querySelectorAll('#search-results li p.context').length > 0",
        timeout=20_000)
    assert _sideways(page) == []
    assert page.errors == []


#: Words found both in the chapters' prose and in their code cells or formulas.
SNIPPET_SEARCHES = {"en": ["import", "alpha", "barrier"], "zh": ["import", "alpha", "屏障"]}


@pytest.mark.parametrize("phone_or_desktop", VIEWPORTS, indirect=True)
@pytest.mark.parametrize("lang", LANGS)
def test_search_snippets_show_no_latex_or_code(phone_or_desktop, site_url, lang):
    page = phone_or_desktop
    for term in SNIPPET_SEARCHES[lang]:
        page.goto(f"{site_url}/{lang}/search.html?q={quote(term)}")
        page.wait_for_function(
            "() => /[0-9]/.test(document.querySelector('#search-results p.search-summary')"
            "?.textContent ?? '')", timeout=20_000)  # the search finished
        hits = page.locator("#search-results ul.search li")
        count = hits.count()
        assert count > 0, term
        page.wait_for_function(  # every hit's snippet fetched
            f"() => document.querySelectorAll('#search-results li p.context').length >= {count}",
            timeout=20_000)
        for snippet in page.locator("#search-results li p.context").all_inner_texts():
            for code in ("\\", "import torch", "from d2l_ext import", "$$", ">>>",
                         "kernelName", "requestKernel", ".ipynb", ".pdf"):
                assert code not in snippet, (term, code, snippet)
            # what every chapter starts with: its run note, the quick answers' heading and
            # their lead-in sentence
            assert RUN_NOTE[lang] not in snippet, (term, snippet)
            assert not snippet.lstrip(". ").startswith(QUICK_ANSWERS[lang]), (term, snippet)
            assert QUICK_LEAD_IN[lang] not in snippet, (term, snippet)
    assert page.errors == []


#: How a chapter's run note starts, and its quick answers' heading (tools/pipeline/runinfo.py).
RUN_NOTE = {"en": "The outputs on this page come from", "zh": "本页输出来自"}
QUICK_ANSWERS = {"en": "Quick answers", "zh": "速查"}
#: How the quick answers' lead-in sentence starts ("What to try, and what each did in this
#: page's run (each link leads to its section):").
QUICK_LEAD_IN = {"en": "What to try", "zh": "值得一试的做法"}

#: Search.htmlToText (book.js) on each chapter page fetched as the search page fetches it:
#: the text, the page's title, and each inline formula's LaTeX with book.js's text of it.
_SNIPPET_TEXT = """async path => {
  const html = await (await fetch(path)).text();
  const doc = new DOMParser().parseFromString(html, 'text/html');
  const title = doc.querySelector('article h1').textContent.replace(/#\\s*$/, '').trim();
  const formulas = [...doc.querySelectorAll('article p span.math')].slice(0, 12)
    .map(el => [el.textContent, Search.texAsText(el.textContent)]);
  return {text: Search.htmlToText(html, ''), title, formulas};
}"""


@pytest.mark.parametrize("lang", LANGS)
def test_snippets_leave_out_the_title_and_the_lead_in_and_keep_formulas_as_text(page, site_url,
                                                                                 lang):
    """The text that a hit's snippet is cut from (book.js's Search.htmlToText): without the
    page's title (the hit's link says it), the run note, the quick answers' heading and
    lead-in; a formula in it reads as text, not as a gap or as LaTeX."""
    page.goto(f"{site_url}/{lang}/search.html")
    page.wait_for_function("() => typeof Search !== 'undefined' && Search.bookPatched")
    with_formulas = 0
    for name in CHAPTERS:
        got = page.evaluate(_SNIPPET_TEXT, f"chapters/{name}.html")
        text = " ".join(got["text"].split())
        assert got["title"] and got["title"] not in text, (name, text[:200])
        for start in (RUN_NOTE[lang], QUICK_ANSWERS[lang], QUICK_LEAD_IN[lang]):
            assert start not in text[:400], (name, start, text[:400])
        assert "\\" not in text and "\\(" not in got["text"], name
        for tex, said in got["formulas"]:
            assert said and "\\" not in said and "{" not in said, (tex, said)
            assert said in text, (name, tex, said)
            with_formulas += 1
    assert with_formulas > 20
    assert page.errors == []


#: LaTeX of the book's formulas and the text a snippet shows for it (book.js's texAsText).
FORMULA_TEXTS = [
    ("\\(2P + 2P + 12P\\)", "2P + 2P + 12P"),
    ("\\(B \\times w\\)", "B × w"),
    ("\\(\\alpha + n/\\beta\\)", "α + n/β"),
    ("\\(\\frac{12P}{a}\\)", "12P/a"),
    ("\\(\\tfrac{1}{2} \\sqrt{n}\\)", "1/2 √n"),
    ("\\(2^{-8} \\approx 0.4\\,\\%\\)", "2^(-8) ≈ 0.4 %"),
    ("\\(P = \\sum_\\ell (n_{\\ell-1} n_\\ell + n_\\ell)\\)", "P = Σ_ℓ (n_(ℓ-1) n_ℓ + n_ℓ)"),
    ("\\(\\textrm{MiB} \\cdot \\left\\lceil x \\right\\rceil\\)", "MiB · ⌈ x ⌉"),
    ("\\[\\binom{n}{2} \\le \\max(a, b)\\]", "C(n, 2) ≤ max(a, b)"),
]


def test_a_formula_reads_as_text_in_a_snippet(page, site_url):
    page.goto(f"{site_url}/en/search.html")
    page.wait_for_function("() => typeof Search !== 'undefined' && Search.bookPatched")
    said = page.evaluate("texts => texts.map(t => Search.texAsText(t))",
                         [tex for tex, _ in FORMULA_TEXTS])
    assert said == [text for _, text in FORMULA_TEXTS]


def test_search_leaves_out_the_run_note_and_the_quick_answers_heading():
    """book_ext.not_searched: the framework containers that hold only a block quote right
    under the page's title (the run note, one per framework) and the quick answers' heading;
    not a later block quote in a framework container, nor the quick answers themselves."""
    from docutils import nodes

    sys.path.insert(0, str(ROOT / "tools" / "sphinx_ext"))
    import book_ext

    def quoted(framework, text):
        return nodes.container("", nodes.block_quote("", nodes.paragraph(text=text)),
                               classes=["fw", f"fw-{framework}"])

    notes = [quoted(fw, f"{RUN_NOTE['en']} a real run ({fw}).") for fw in ("torch", "mxnet")]
    heading = nodes.title(text=QUICK_ANSWERS["en"])
    lead_in = nodes.paragraph(text="What to try.")
    box = nodes.admonition("", heading, lead_in, nodes.bullet_list(),
                           nodes.paragraph(text="A closing note."),
                           classes=["tip", "quick-answers"])
    later = quoted("torch", "A quotation further down.")
    page = nodes.section("", nodes.title(text="Communication"), nodes.target(), *notes, box,
                         nodes.paragraph(text="The opening."), later)
    document = nodes.document(None, None)
    document += page
    assert book_ext.not_searched(document) == [*notes, heading, lead_in]
    # each framework's answers in a container of their own, each with its lead-in
    leads = [nodes.paragraph(text=f"What to try ({fw}).") for fw in ("torch", "mxnet")]
    per_framework = [nodes.container("", lead, nodes.bullet_list(), classes=["fw", f"fw-{fw}"])
                     for lead, fw in zip(leads, ("torch", "mxnet"))]
    heading = nodes.title(text=QUICK_ANSWERS["en"])
    tabbed = nodes.document(None, None)
    tabbed += nodes.section("", nodes.title(text="Memory"), nodes.admonition(
        "", heading, *per_framework, classes=["tip", "quick-answers"]))
    assert book_ext.not_searched(tabbed) == [heading, *leads]
    bare = nodes.section("", nodes.title(text="Landing"), nodes.paragraph(text="Prose."),
                         quoted("torch", "Not a run note."))
    landing = nodes.document(None, None)
    landing += bare
    assert book_ext.not_searched(landing) == []


def test_search_index_holds_no_latex(site_url):
    """Formulas are not indexed: a search for a LaTeX command finds no page."""
    for lang in LANGS:
        index = (SITE / lang / "searchindex.js").read_text(encoding="utf-8")
        terms = json.loads(index[index.index("(") + 1:index.rindex(")")])["terms"]
        assert terms.get("fraction")  # in the prose
        for command in ("frac", "mathrm", "cdot", "approx"):
            assert not terms.get(command), (lang, command)


@pytest.mark.parametrize("lang", LANGS)
def test_no_empty_index_page(site_url, lang):
    """No general index page (Sphinx's would be empty) and nothing links one; the edition's
    landing page has prose and links every chapter; the site's root offers both editions."""
    assert not (SITE / lang / "genindex.html").exists()
    for path in PAGES:
        assert "genindex" not in (SITE / lang / path).read_text(encoding="utf-8"), path
    landing = _html(lang, "index.html").select_one("article")
    prose = [p.get_text(strip=True) for p in landing.find_all("p")]
    assert len(prose) >= 2 and sum(len(p) for p in prose) > 200
    linked = {Path(a["href"]).stem for a in landing.select("a[href^='chapters/']")}
    assert linked >= set(toc.chapters())  # a chapter's section pages: from the chapter
    choice = (SITE / "index.html").read_text(encoding="utf-8")
    assert 'href="en/index.html"' in choice and 'href="zh/index.html"' in choice


def _sphinx_page(tmp_path: Path, lang: str, text: str, ids: Path) -> None:
    """Build a one-page Sphinx project in edition ``lang`` with the shared section ids."""
    from sphinx.application import Sphinx

    src = tmp_path / lang
    src.mkdir(parents=True)
    (src / "index.rst").write_text(text, encoding="utf-8")
    (src / "conf.py").write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(ROOT / 'tools' / 'sphinx_ext')!r})\n"
        "extensions = ['book_sections']\n"
        f"book_section_ids_{'write' if lang == 'en' else 'read'} = {str(ids)!r}\n"
        "def setup(app):\n"
        f"    app.add_config_value('book_lang', {lang!r}, 'env')\n"
        "    app.add_config_value('book_other_lang', 'en', 'env')\n", encoding="utf-8")
    Sphinx(str(src), str(src), str(tmp_path / "out" / lang), str(tmp_path / "dt" / lang),
           "html", status=None, warning=None, freshenv=True).build()


def test_a_build_whose_editions_differ_in_headings_stops(tmp_path):
    """A real Sphinx build: the Chinese page takes the English section ids, and stops, naming
    page and heading, when a heading's level differs."""
    ids = tmp_path / "section-ids.json"
    _sphinx_page(tmp_path, "en", "Memory\n======\n\nCounting\n--------\n\nText.\n", ids)
    _sphinx_page(tmp_path, "zh", "内存\n====\n\n计数\n----\n\n文字。\n", ids)
    assert 'id="counting"' in (tmp_path / "out" / "zh" / "index.html").read_text("utf-8")
    sections = _book_sections()
    with pytest.raises(sections.HeadingMismatch, match=r"index: heading 2 is '计数' at level 1"):
        _sphinx_page(tmp_path / "again", "zh", "内存\n====\n\n计数\n====\n\n文字。\n", ids)


def test_description_is_plain_text_of_the_first_paragraph():
    """Whole sentences of the first paragraph of running text, inline code kept as its text:
    a sentence with a formula ends the description (the first one loses it instead); it
    starts at the sentence that says what the page does when the ones before it would not
    fit beside it."""
    from docutils.core import publish_doctree

    sys.path.insert(0, str(ROOT / "tools" / "sphinx_ext"))
    import book_meta

    def described(rst: str) -> str:
        return book_meta.description(publish_doctree(
            rst, settings_overrides={"doctitle_xform": False, "report_level": 5}))

    text = described("T\n=\n\n.. note:: A note.\n\nCalls such as ``x.item()`` wait. They "
                     "cost time. The cost is :math:`\\alpha + n/\\beta`. More.\n")
    assert text == "Calls such as x.item() wait. They cost time."
    assert described("T\n=\n\nFusion by ``torch.compile`` and ``hybridize`` pays.\n") == (
        "Fusion by torch.compile and hybridize pays.")
    other = "Chapter Data-Parallel Training on Several GPUs trained ResNet-18 with a loop. "
    own = ("This page finds out where the time of a training step goes, and whether the data "
           "loader keeps up, each with a measurement taken on the machine that runs it. ")
    assert described("T\n=\n\n" + other + own + "More.\n").startswith("This page finds")
    assert described("T\n=\n\nShort. This chapter opens them up.\n") == (
        "Short. This chapter opens them up.")
    zh_other = ("“多 GPU 数据并行训练”一章用 d2l 的训练循环在 Fashion-MNIST 上训练了 ResNet-18，"
                "本章要让这段训练跑得更快。")
    zh_own = ("本页打下基础：弄清一个训练步的时间花在哪里，以及数据加载器跟不跟得上，"
              "每一项都给出在运行本页的机器上实测的结果。")
    assert described(f"标题\n====\n\n{zh_other}{zh_own}\n") == zh_own
    long = described("T\n=\n\n" + "Word " * 60 + "end. Next sentence.\n")
    assert long.endswith("…") and book_meta.width(long) <= book_meta.DESCRIPTION_WIDTH + 1
    assert described("标题\n====\n\n第一句。第二句，带公式 :math:`x^2`。\n") == "第一句。"


def test_printed_tables_keep_their_lines_and_result_tables_fit():
    """A printed output whose lines align columns with runs of spaces is a text table
    (book.css keeps it unwrapped); printed sentences are not, and wrap. A result table's
    column of names is aligned left and its long names may break after "_" and "="."""
    sys.path.insert(0, str(ROOT / "tools" / "sphinx_ext"))
    import book_ext

    assert book_ext.is_text_table("name      time\n-----  ----\nmm        3.2 ms\n")
    assert not book_ext.is_text_table("Exercise 2: set steps_to_pay, then run the cell again.")
    assert not book_ext.is_text_table("差不到  1%，这是测量之间的噪声")  # one stray double space
    log = ("V1130 09:57:06.681000 30574 torch/_dynamo/guards.py:5396] [0/1] [__recompiles] "
           "Recompiling function gelu in /tmp/ipykernel_30574/3523240837.py:1\n"
           "V1130 09:57:06.681000 30574 torch/_dynamo/guards.py:5396] [0/1] [__recompiles]     "
           "triggered by the following guard failure(s):\n"
           "V1130 09:57:06.681000 30574 torch/_dynamo/guards.py:5396] [0/1] [__recompiles]     "
           "- 0/0: tensor 'x' size mismatch at index 0. expected 16777216, actual 16777120\n")
    assert not book_ext.is_text_table(log)  # a log's indented messages are no columns
    assert not book_ext.is_text_table("[09:57:06] ../src/a.cc:12:   x\n"
                                      "[09:57:07] ../src/a.cc:12:   y\n")
    table = ('<table class="d2l-table">\n<thead><tr><th style="text-align: right">strategy</th>'
             '<th style="text-align: right">MiB</th></tr></thead>\n<tbody>\n'
             '<tr><td style="text-align: right">DDP</td>'
             '<td style="text-align: right">62.5</td></tr>\n'
             '<tr><td style="text-align: right">FSDP, reshard_after_forward=False</td>'
             '<td style="text-align: right">39.8</td></tr>\n</tbody>\n</table>')
    fitted = book_ext.fitting_table(table)
    assert '<th style="text-align: left">strategy</th>' in fitted
    assert '<td style="text-align: left">FSDP, reshard_<wbr>after_<wbr>forward=<wbr>False</td>' \
        in fitted
    assert '<td style="text-align: right">39.8</td>' in fitted


# ---- Figures: numbered, captioned, described in the page's language, enlarged on a tap ----

HAN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff]")
FIGURE_LABEL = {"en": "Figure", "zh": "图"}


FRAMEWORKS = ("torch", "mxnet")


def _notebook_figure_numbers(lang: str, name: str, framework: str) -> list[str]:
    """The numbers that the captions of the chapter's notebook of ``framework`` carry."""
    notebook = json.loads((ROOT / "notebooks" / lang / framework / f"{name}.ipynb").read_text(
        encoding="utf-8"))
    return [number for cell in notebook["cells"] if cell["cell_type"] == "markdown"
            for number in re.findall(rf"\*\*{FIGURE_LABEL[lang]} (\d+\.\d+)\*\*",
                                     "".join(cell["source"]))]


def _tab_numbers(figure) -> dict[str, str]:
    """A figure's number under each tab that shows it (book_figures.py's data attributes)."""
    number = figure.select_one(".caption-number .fig-number")
    return {fw: number[f"data-{fw}"] for fw in FRAMEWORKS if number.has_attr(f"data-{fw}")}


def _page_figure_numbers(lang: str, name: str) -> dict[str, list[str]]:
    """The numbers of the page's figures under each tab, in the page's order."""
    found: dict[str, list[str]] = {fw: [] for fw in FRAMEWORKS}
    for figure in _html(lang, f"chapters/{name}.html").select("article figure"):
        for fw, number in _tab_numbers(figure).items():
            found[fw].append(number)
    return found


@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.parametrize("name", CHAPTERS)
def test_every_figure_is_numbered_captioned_and_described_in_the_page_language(site_url, lang,
                                                                               name):
    """Every image of a chapter, static or drawn by a code cell, is a figure numbered in the
    chapter (Figure 3.2 / 图 3.2, the chapter's number from _toc.yml's reading order), with
    each tab's number (its own framework's, or both for a shared figure; the label shows
    PyTorch's, else its own), a caption and alt text in the page's language (not an
    image's hash), and the notebooks' captions carry the same numbers per framework."""
    article = _html(lang, f"chapters/{name}.html").select_one("article")
    images = article.find_all("img")
    drawn = [_notebook_figure_numbers(lang, name, fw) for fw in FRAMEWORKS]
    assert bool(images) == any(drawn), "the page's figures and its notebooks' differ"
    chapter = toc.chapter_numbers()[name]
    for img in images:
        figure = img.find_parent("figure")
        assert figure is not None and figure.get("id"), f"an image outside a figure: {img}"
        number = figure.select_one(".caption-number").get_text().strip()
        assert re.fullmatch(rf"{FIGURE_LABEL[lang]} {chapter}\.\d+", number), number
        tabs = _tab_numbers(figure)
        assert tabs and number.split()[-1] == tabs.get("torch", tabs.get("mxnet")), tabs
        caption = figure.select_one(".caption-text").get_text().strip()
        alt = img.get("alt", "")
        for text in (caption, alt):
            assert len(text) > 10, f"{figure['id']}: {text!r}"
            assert bool(HAN.search(text)) == (lang == "zh"), f"{figure['id']}: {text!r}"
        assert not re.search(r"[0-9a-f]{32}|_images/|\.(png|svg|jpe?g)$", alt), alt
        # the alt text says what the figure shows, not the caption again nor how it was drawn
        assert " ".join(alt.split()) != " ".join(caption.split()), f"{figure['id']}: {alt!r}"
        assert not re.search(r"Drawn by|由.*画出|d2l_ext\.", alt), f"{figure['id']}: {alt!r}"
    for fw, numbers in _page_figure_numbers(lang, name).items():
        assert _notebook_figure_numbers(lang, name, fw) == numbers, fw


@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.parametrize("chapter", toc.chapters())
def test_each_tab_numbers_a_chapters_figures_without_gaps(site_url, lang, chapter):
    """The reader of one tab sees the chapter's figures numbered 1, 2, 3, ... over its pages
    in reading order: the other framework's figures leave no gap (issue #31)."""
    pages = toc.read()[chapter]
    number = toc.chapter_numbers()[chapter]
    for fw in FRAMEWORKS:
        numbers = [n for page in pages for n in _page_figure_numbers(lang, page)[fw]]
        assert numbers == [f"{number}.{i}" for i in range(1, len(numbers) + 1)], (fw, numbers)


def _figure_numbered_per_tab() -> tuple[str, str, dict[str, str]]:
    """A page, a figure on it shown under both tabs with a number of its own in each."""
    for name in CHAPTERS:
        for figure in _html("en", f"chapters/{name}.html").select("article figure[id]"):
            tabs = _tab_numbers(figure)
            if len(set(tabs.values())) == len(FRAMEWORKS):
                return name, figure["id"], tabs
    pytest.fail("no shared figure has a number of its own in each tab")


@pytest.mark.parametrize("lang", LANGS)
def test_a_figures_label_shows_the_selected_tabs_number(page, site_url, lang):
    """A shared figure's label shows the number of the selected tab and changes with the
    tab; the labels of the figures that a tab shows run without gaps."""
    name, figure_id, tabs = _figure_numbered_per_tab()
    page.goto(f"{site_url}/{lang}/chapters/{name}.html")
    label = page.locator(f"figure#{figure_id} .caption-number")
    for fw in ("mxnet", "torch", "mxnet"):
        page.locator(f".book-bar .fw-tab[data-fw={fw}]").click()
        assert label.inner_text().strip() == f"{FIGURE_LABEL[lang]} {tabs[fw]}"
        shown = [int(text.split(".")[-1]) for text in page.eval_on_selector_all(
            "article figure .caption-number",
            "els => els.filter(e => e.offsetParent !== null).map(e => e.textContent.trim())")]
        assert shown == list(range(shown[0], shown[0] + len(shown))), (fw, shown)
    page.reload()  # the tab is remembered, and so is the number
    assert label.inner_text().strip() == f"{FIGURE_LABEL[lang]} {tabs['mxnet']}"
    assert page.errors == []


CLOSE = {"en": "Close", "zh": "关闭"}


@pytest.mark.parametrize("phone_or_desktop", VIEWPORTS, indirect=True)
@pytest.mark.parametrize("lang", LANGS)
def test_a_tap_on_a_figure_enlarges_it(phone_or_desktop, site_url, lang):
    """A click (or a tap on a phone) on a figure opens it over the page, larger, with its
    caption and a close button in the page's language, which takes the focus; on a phone the
    image keeps its own size and the overlay pans over it (a tap on the image keeps it open).
    The button, a tap beside the image and Escape close it; Enter on a focused figure opens
    it. The label "Figure 3.2" / "图 3.2" is upright (CJK has no italic)."""
    page = phone_or_desktop
    page.goto(f"{site_url}/{lang}/chapters/{CHAPTERS[0]}.html")
    image = page.locator("article figure img[src$='.png'] >> visible=true").first  # a plot
    image.scroll_into_view_if_needed()
    page.wait_for_function("img => img.complete", arg=image.element_handle())
    width = image.bounding_box()["width"]
    figure = image.locator("xpath=ancestor::figure[1]")
    number = figure.locator(".caption-number").inner_text().strip()
    phone = page.viewport_size["width"] < 500
    image.tap() if phone else image.click()
    zoom = page.locator(".fig-zoom")
    assert zoom.is_visible()
    big = zoom.locator("img").bounding_box()
    assert big["width"] > width * 1.2 or big["height"] > image.bounding_box()["height"] * 1.2
    assert number in zoom.inner_text()
    close = zoom.get_by_role("button", name=CLOSE[lang])
    assert close.is_visible()
    assert close.evaluate("button => document.activeElement === button")
    if phone:  # the image at its natural size, wider than the phone: the overlay pans
        natural = zoom.locator("img").evaluate("img => img.naturalWidth")
        assert big["width"] >= min(natural, 600) > page.viewport_size["width"]
        assert zoom.evaluate("el => el.scrollWidth > el.clientWidth")
        zoom.locator("img").tap()
        assert zoom.is_visible()
    close.tap() if phone else close.click()
    assert zoom.count() == 0
    image.tap() if phone else image.click()
    zoom.click(position={"x": 5, "y": 5})  # beside the image
    assert zoom.count() == 0
    image.focus()
    page.keyboard.press("Enter")
    assert page.locator(".fig-zoom").is_visible()
    page.keyboard.press("Escape")
    assert page.locator(".fig-zoom").count() == 0
    label = figure.locator(".caption-number")
    assert label.evaluate("el => getComputedStyle(el).fontStyle") == "normal"
    assert page.errors == []


PRINT = {"en": "Print / save as PDF", "zh": "打印 / 另存为 PDF"}


@pytest.mark.parametrize("lang", LANGS)
def test_the_print_item_says_what_it_does(page, site_url, lang):
    """The download menu's print item says "print / save as PDF" in its text, not only in a
    tooltip that a phone never shows (the theme's text is ".pdf")."""
    page.goto(f"{site_url}/{lang}/chapters/{CHAPTERS[0]}.html")
    item = page.locator(".btn-download-pdf-button .btn__text-container")
    assert item.count() == 1 and item.text_content().strip() == PRINT[lang]


# ---- One search field, outputs, the landing page (issue #31, second review round) ----


@pytest.mark.parametrize("width", [992, 1366])
@pytest.mark.parametrize("lang", LANGS)
def test_one_search_field_on_a_desktop(browser, site_url, width, lang):
    """Where the sidebar shows a search field (992 px and wider) it is the only one: the
    theme's header strip above it, with a second field (an empty strip from 960 to 992 px),
    is gone, and the sidebars stick to the top of the window when the page scrolls."""
    context = browser.new_context(viewport={"width": width, "height": 900})
    page = _watched_page(context)
    try:
        page.goto(f"{site_url}/{lang}/chapters/{CHAPTERS[0]}.html")
        page.wait_for_load_state("load")
        fields = page.evaluate("""() => [...document.querySelectorAll('.search-button-field')]
          .filter(e => e.getClientRects().length).map(e => !!e.closest('.bd-sidebar-primary'))""")
        assert fields == [True]
        assert not page.locator("#pst-header").is_visible()
        assert page.locator(".bd-header-article .book-lang").is_visible()
        page.evaluate("() => window.scrollTo(0, 3000)")
        page.wait_for_timeout(100)
        tops = page.evaluate("""() => ['.bd-sidebar-primary', '.bd-sidebar-secondary'].map(s =>
          document.querySelector(s).getBoundingClientRect().top)""")
        assert all(abs(top) < 1 for top in tops), tops
        assert page.errors == []
    finally:
        context.close()


@page_check("tuning-tips-switches", ("en",))
def test_a_long_log_line_wraps_in_its_box(page, lang):
    """TORCH_LOGS' recompilation lines (wider than the column) wrap: the guard that failed
    shows, not beyond the box's edge. Text tables keep their lines (their own test)."""
    logs = page.locator(".cell_output pre", has_text="[__recompiles]")
    assert logs.count() >= 1
    for i in range(logs.count()):
        fits = logs.nth(i).evaluate("pre => pre.scrollWidth <= pre.clientWidth + 1")
        assert fits, logs.nth(i).inner_text()[:200]


@pytest.mark.parametrize("lang", LANGS)
def test_a_cells_printed_lines_are_one_block(site_url, lang):
    """A cell's lines printed in a row (a loop's "round k/5", say) show as one output block,
    not a grey box per line: no two outputs of the same stream follow each other."""
    found = []
    for name in CHAPTERS:
        for area in _html(lang, f"chapters/{name}.html").select(".cell_output"):
            outputs = [child for child in area.find_all(recursive=False)
                       if "output" in child.get("class", [])]
            for first, second in zip(outputs, outputs[1:]):
                kinds = [("stderr" if "stderr" in o["class"] else "stream")
                         for o in (first, second) if "stream" in o["class"]
                         or "stderr" in o["class"]]
                if len(kinds) == 2 and kinds[0] == kinds[1]:
                    found.append((name, first.get_text()[:60]))
    assert found == []


def _landing_items(lang: str) -> dict[str, str]:
    """Chapter name -> the text of its item in the built landing page's list of chapters."""
    article = _html(lang, "index.html").select_one("article")
    items = {}
    for li in article.select("ol > li"):
        link = li.select_one("a[href^='chapters/']")
        if link is not None:
            items[Path(link["href"].split("#")[0]).stem] = " ".join(li.get_text().split())
    return items


def test_the_landing_page_reads_well():
    """The opening sentence lists its topics with one ", and"; the "out of memory" reading
    path leads to the transformers page's activations and recomputation; each zh chapter
    item joins title and description with a dash (the title has a colon of its own) and
    names the machine in its run time without a chain of colons."""
    en = _html("en", "index.html").select_one("article")
    opening = " ".join(en.find("p").get_text().split())
    assert opening.count(", and ") == 1, opening
    for lang, words in (("en", "Out of memory"), ("zh", "显存不足")):
        path = next(li for li in _html(lang, "index.html").select("article li")
                    if li.get_text().startswith(words))
        links = {a["href"] for a in path.select("a")}
        assert {"chapters/transformers.html#sec-transformers-activations",
                "chapters/transformers.html#sec-transformers-recompute"} <= links, links
    items = _landing_items("zh")
    assert set(items) == set(toc.chapters())
    for name, text in items.items():
        title = _html("zh", f"chapters/{name}.html").select_one("article h1").get_text()
        title = re.sub(r"^[\d.]+\s*|#$", "", title.strip()).strip()
        assert text.startswith(f"{title}——"), text
        assert "机器：" not in text and text.count("运行时间：") == 1, text
