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
import shutil
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote, urlparse

import pytest

ROOT = Path(__file__).resolve().parents[1]
SITE = ROOT / "_build" / "site"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
PAGE = "chapters/async-computation.html"
LANGS = ("en", "zh")

playwright = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
yaml = pytest.importorskip("yaml", reason="the book tools need the full environment")


def _chapters_in(entries: list[dict]) -> list[str]:
    """The chapter pages that the table-of-contents ``entries`` list, in the book's order."""
    names = []
    for entry in entries:
        if str(entry.get("file", "")).startswith("chapters/"):
            names.append(Path(entry["file"]).stem)
        for key in ("parts", "chapters", "sections"):
            names += _chapters_in(entry.get(key, []))
    return names


#: Every chapter in ``_toc.yml``: a new chapter is checked here as soon as it is listed there.
CHAPTERS = _chapters_in([yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))])


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
        # pydata-sphinx-theme logs this on a first visit (no saved light/dark mode).
        if message.text == "Got invalid theme mode: . Resetting to auto.":
            return
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
    assert sizes, "no images on the page"
    assert all(width > 0 for _, width in sizes), sizes
    for fw in ("torch", "mxnet"):  # every framework's outputs include a figure
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


#: The checks that every chapter gets, in the order they run on each language's page (the
#: formulas first, on the page as loaded, before any tab is clicked).
GENERIC_CHECKS = {"formulas": _formulas_render, "links": _links_point_at_notebooks,
                  "images": _images_load, "licence": _footer_names_the_licences}


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


@page_check("tuning-tips")
def test_tuning_page_shows_each_framework_its_own_ladder(page, lang):
    """The speed ladder's code, table and chart sit under the PyTorch tab; MXNet's shorter
    ladder under the MXNet tab; each hides when the other framework is chosen."""
    page.locator(".book-bar .fw-tab[data-fw=torch]").click()
    torch_ladder = page.locator(".tag_torch", has_text="ladder.run(rungs")
    torch_table = page.locator(".tag_torch", has_text="print(ladder.table(results")
    mxnet_ladder = page.locator(".tag_mxnet", has_text="mx_rungs = [")
    assert torch_ladder.is_visible() and not mxnet_ladder.is_visible()
    assert {"en": "x previous", "zh": "相对前一级"}[lang] in torch_table.inner_text()  # the run
    assert torch_table.locator("img").count() >= 1  # the bar chart
    page.locator(".book-bar .fw-tab[data-fw=mxnet]").click()
    assert mxnet_ladder.is_visible() and not torch_ladder.is_visible()
    assert page.errors == []


@page_check("host-device-sync")
def test_sync_page_shows_each_framework_its_losses_and_timeline(page, lang):
    page.locator(".book-bar .fw-tab[data-fw=torch]").click()
    fix = page.locator(".tag_torch", has_text="def loss_ignore_index")
    timeline = page.locator(".tag_torch", has_text="def draw(path, ax, name)")
    mx_loss = page.locator(".tag_mxnet", has_text="def loss_no_blocking")
    assert fix.is_visible() and timeline.is_visible() and not mx_loss.is_visible()
    assert timeline.locator("img").count() == 1  # the timeline drawn from the trace
    # the table of synchronisations, one cell with each framework's output from its run
    counts = page.locator(".tag_torch", has_text="LOSS = d2l.message(")
    mx_counts = page.locator(".tag_mxnet", has_text="LOSS = d2l.message(")
    assert "ignore_index" in counts.inner_text() and not mx_counts.is_visible()  # from the run
    table = counts.locator(".cell_output").inner_text()  # in the reader's language
    assert ("同步次数/步" in table) == (lang == "zh") and ("syncs/step" in table) == (lang == "en")
    page.locator(".book-bar .fw-tab[data-fw=mxnet]").click()
    assert mx_loss.is_visible() and not fix.is_visible()
    assert "no_blocking" in mx_counts.inner_text() and not counts.is_visible()
    assert page.errors == []


@page_check("gpu-basics")
def test_gpu_basics_page_shows_each_framework_its_data_parallel(page, lang):
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
    assert {"en": "vs one device", "zh": "与单设备相比"}[lang] in check.inner_text()
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
    assert {"en": "ring yes, server yes", "zh": "环形是，服务器式是"}[lang] in \
        check.inner_text()
    page.locator(".book-bar .fw-tab[data-fw=mxnet]").click()
    assert server_job.is_visible() and not ring.is_visible()
    assert page.errors == []


@page_check("memory")
def test_memory_page_shows_each_framework_its_own_counter(page, lang):
    """The PyTorch tab counts with d2l_ext.memory's Tracker and runs the sharding script; the
    MXNet tab counts with the profiler's storage counter; the counting table from the run is
    in the page's language; the recorded timeline's figure loads under PyTorch."""
    page.locator(".book-bar .fw-tab[data-fw=torch]").click()
    counting = page.locator(".tag_torch", has_text="with memory.Tracker(device) as tracker:")
    sharding = page.locator(".tag_torch", has_text="%%writefile memory_lab.py")
    mx_counter = page.locator(".tag_mxnet", has_text="counter = mxnet_memory.StorageCounter()")
    assert counting.is_visible() and sharding.is_visible() and not mx_counter.is_visible()
    assert {"en": "measured - predicted, bytes", "zh": "实测 \u2212 预测（字节）"}[lang] in \
        counting.inner_text()
    page.locator(".book-bar .fw-tab[data-fw=mxnet]").click()
    assert mx_counter.is_visible() and not counting.is_visible()
    assert page.errors == []
