"""The built website, in a real browser (Debian's chromium driven by Playwright)."""

import functools
import http.server
import shutil
import sys
import threading
from pathlib import Path
from urllib.parse import quote, urlparse

import pytest

ROOT = Path(__file__).resolve().parents[1]
SITE = ROOT / "_build" / "site"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
PAGE = "chapters/async-computation.html"
CHAPTERS = sorted(p.stem for p in (ROOT / "chapters" / "en").glob("*.md") if p.stem != "index")

playwright = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")


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


@pytest.fixture
def page(browser):
    context = browser.new_context()
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
    yield page
    context.close()


def _visible(page, selector):
    return page.eval_on_selector_all(
        selector, "els => els.map(e => e.offsetParent !== null || e.getClientRects().length > 0)")


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


def test_one_framework_cell_hides_completely(page, site_url):
    page.goto(f"{site_url}/en/{PAGE}")
    page.locator(".book-bar .fw-tab[data-fw=mxnet]").click()
    # the set_sync_debug_mode cell exists for PyTorch only (d2l-en #1479)
    cell = page.locator(".tag_torch", has_text="set_sync_debug_mode")
    assert cell.count() == 1
    assert not cell.is_visible()
    assert not page.get_by_text("set_sync_debug_mode(\"warn\")").first.is_visible()
    page.locator(".book-bar .fw-tab[data-fw=torch]").click()
    assert cell.is_visible()


def test_a_group_without_one_framework_says_so(page, site_url):
    page.goto(f"{site_url}/en/{PAGE}")
    groups = page.eval_on_selector_all(
        ".fw-group", "gs => gs.map(g => [g.querySelectorAll('.tag_torch, .fw-torch').length,"
        " g.querySelectorAll('.tag_mxnet, .fw-mxnet').length])")
    # every group offers content or an explicit note for both frameworks
    assert all(t > 0 and m > 0 for t, m in groups)


@pytest.mark.parametrize("name", CHAPTERS)
def test_language_switch_lands_on_the_same_chapter(page, site_url, name):
    path = f"chapters/{name}.html"
    page.goto(f"{site_url}/en/{path}")
    page.locator(".book-lang").click()
    page.wait_for_load_state()
    assert urlparse(page.url).path == f"/zh/{path}"
    assert page.locator("html").get_attribute("lang").startswith("zh")
    page.locator(".book-lang").click()
    page.wait_for_load_state()
    assert urlparse(page.url).path == f"/en/{path}"
    assert page.errors == []


@pytest.mark.parametrize("name", CHAPTERS)
def test_launch_and_download_links_point_at_existing_notebooks(page, site_url, name):
    for lang in ("en", "zh"):
        page.goto(f"{site_url}/{lang}/chapters/{name}.html")
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


@pytest.mark.parametrize("name", CHAPTERS)
def test_images_load_and_no_console_errors(page, site_url, name):
    for lang in ("en", "zh"):
        page.goto(f"{site_url}/{lang}/chapters/{name}.html")
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
    assert page.errors == []


@pytest.mark.parametrize("name", CHAPTERS)
def test_formulas_render_without_internet(page, site_url, name):
    page.goto(f"{site_url}/en/chapters/{name}.html")
    page.wait_for_function("() => window.MathJax?.startup?.promise")
    page.evaluate("() => MathJax.startup.promise")  # typesetting done
    formulas = page.locator(".math").count()
    assert formulas > 0
    assert page.locator("mjx-container").count() == formulas
    assert page.errors == []


def test_page_names_the_machine_of_its_outputs(page, site_url):
    page.goto(f"{site_url}/en/{PAGE}")
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


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_multi_gpu_page_shows_the_ddp_loop_under_the_pytorch_tab(page, site_url, lang):
    page.goto(f"{site_url}/{lang}/chapters/multi-gpu-concise.html")
    page.locator(".book-bar .fw-tab[data-fw=torch]").click()
    script = page.locator(".tag_torch", has_text="%%writefile train_ddp.py")
    assert script.is_visible()
    for call in ("init_process_group", "DistributedDataParallel(net", "sampler.set_epoch(epoch)",
                 "dist.all_reduce"):
        assert call in script.inner_text()
    page.locator(".book-bar .fw-tab[data-fw=mxnet]").click()
    assert not script.is_visible()
    assert page.errors == []


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_tuning_page_shows_each_framework_its_own_ladder(page, site_url, lang):
    """The speed ladder's code, table and chart sit under the PyTorch tab; MXNet's shorter
    ladder under the MXNet tab; each hides when the other framework is chosen."""
    page.goto(f"{site_url}/{lang}/chapters/tuning-tips.html")
    page.locator(".book-bar .fw-tab[data-fw=torch]").click()
    torch_ladder = page.locator(".tag_torch", has_text="ladder.run(rungs")
    torch_table = page.locator(".tag_torch", has_text="print(ladder.table(results")
    mxnet_ladder = page.locator(".tag_mxnet", has_text="mx_rungs = [")
    assert torch_ladder.is_visible() and not mxnet_ladder.is_visible()
    assert {"en": "speed-up", "zh": "加速比"}[lang] in torch_table.inner_text()  # from the run
    assert torch_table.locator("img").count() >= 1  # the bar chart
    page.locator(".book-bar .fw-tab[data-fw=mxnet]").click()
    assert mxnet_ladder.is_visible() and not torch_ladder.is_visible()
    assert page.errors == []


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_sync_page_shows_each_framework_its_losses_and_timeline(page, site_url, lang):
    page.goto(f"{site_url}/{lang}/chapters/host-device-sync.html")
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


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_gpu_basics_page_shows_each_framework_its_data_parallel(page, site_url, lang):
    """PyTorch's four primitives and the Hogwild script under the PyTorch tab; Gluon's
    split_and_load version under the MXNet tab; the page's check tables from the run, in the
    page's language."""
    page.goto(f"{site_url}/{lang}/chapters/gpu-basics.html")
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


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_communication_page_shows_each_framework_its_own_messages(page, site_url, lang):
    """The hand-written all-reduces (send/recv) and the comparison with dist.all_reduce under
    the PyTorch tab; a real parameter-server job (dist_sync KVStore) under the MXNet tab; the
    run's checks in the page's language."""
    page.goto(f"{site_url}/{lang}/chapters/communication.html")
    page.locator(".book-bar .fw-tab[data-fw=torch]").click()
    ring = page.locator(".tag_torch", has_text="def ring_all_reduce(x):")
    check = page.locator(".tag_torch",
                         has_text="checked = {k: comm.spawn(comm_lab.check_all_reduces")
    server_job = page.locator(".tag_mxnet", has_text="%%writefile ps_hello.py")
    assert ring.is_visible() and check.is_visible() and not server_job.is_visible()
    assert {"en": "ring True, server True", "zh": "环 True，服务器 True"}[lang] in \
        check.inner_text()
    page.locator(".book-bar .fw-tab[data-fw=mxnet]").click()
    assert server_job.is_visible() and not ring.is_visible()
    assert page.errors == []
