// Framework tabs (synced on the page, remembered across pages), language switch
// (the edition last read is remembered for the root page), and notebook links.
// Data comes from <meta name="book-..."> tags (book_ext.py).
(function () {
  "use strict";
  const FRAMEWORKS = ["torch", "mxnet"];
  const NAMES = { torch: "PyTorch", mxnet: "MXNet" };
  const KEY = "book-framework";
  const meta = (name) => {
    const el = document.querySelector(`meta[name="book-${name}"]`);
    return el ? el.content : null;
  };
  const lang = meta("lang") || "en";
  const TEXT = {
    en: {
      none: (fw) => `This step has no ${NAMES[fw]} code.`,
      launch: { torch: "Open in Colab", mxnet: "Open in SageMaker Studio Lab" },
      download: (fw) => `${NAMES[fw]} notebook (.ipynb)`,
      other: "中文",
      framework: "Framework:",
      close: "Close",
      print: "Print / save as PDF",
    },
    zh: {
      none: (fw) => `此处没有 ${NAMES[fw]} 代码。`,
      launch: { torch: "在 Colab 中打开", mxnet: "在 SageMaker Studio Lab 中打开" },
      download: (fw) => `${NAMES[fw]} 笔记本（.ipynb）`,
      other: "English",
      framework: "框架：",
      close: "关闭",
      print: "打印 / 另存为 PDF",
      // Screen-reader labels that the theme and sphinx-togglebutton write in English.
      aria: { "Toggle hidden content": "显示或隐藏内容", Main: "主导航", Page: "本页" },
    },
  }[lang];

  function frameworkOf(el) {
    for (const fw of FRAMEWORKS) {
      if (el.classList.contains(`tag_${fw}`) || el.classList.contains(`fw-${fw}`)) return fw;
    }
    return null;
  }

  function current() {
    let saved = null;
    try { saved = localStorage.getItem(KEY); } catch (e) { /* storage blocked */ }
    return FRAMEWORKS.includes(saved) ? saved : FRAMEWORKS[0];
  }

  function tabBar() {
    const bar = document.createElement("div");
    bar.className = "fw-tabs";
    bar.setAttribute("role", "tablist");
    for (const fw of FRAMEWORKS) {
      const button = document.createElement("button");
      button.type = "button";
      button.className = "fw-tab";
      button.dataset.fw = fw;
      button.setAttribute("role", "tab");
      button.textContent = NAMES[fw];
      button.addEventListener("click", () => select(fw));
      bar.appendChild(button);
    }
    return bar;
  }

  // Consecutive framework-specific siblings form one tab group. The groups right under the
  // page bar's tabs (the run note and the quick answers) get no tab bar of their own: the
  // page bar's, a line above, switches them (three tab bars on the first screen said one
  // thing three times).
  function buildGroups() {
    const selector = FRAMEWORKS.map((fw) => `.tag_${fw}, .fw-${fw}`).join(", ");
    const grouped = new Set();
    const quiet = new Set([...runNotes(document),
      ...document.querySelectorAll(".quick-answers > .fw")]);
    for (const first of Array.from(document.querySelectorAll(selector))) {
      if (grouped.has(first)) continue;
      const group = [first];
      let next = first.nextElementSibling;
      while (next && frameworkOf(next)) { group.push(next); next = next.nextElementSibling; }
      group.forEach((el) => grouped.add(el));
      const wrapper = document.createElement("div");
      wrapper.className = "fw-group";
      first.parentNode.insertBefore(wrapper, first);
      if (group.some((el) => quiet.has(el))) wrapper.classList.add("fw-group-quiet");
      else wrapper.appendChild(tabBar());
      group.forEach((el) => wrapper.appendChild(el));
      for (const fw of FRAMEWORKS) {
        if (!group.some((el) => frameworkOf(el) === fw)) {
          const none = document.createElement("p");
          none.className = `fw-none fw-${fw}`;
          none.textContent = TEXT.none(fw);
          wrapper.appendChild(none);
        }
      }
    }
  }

  function select(fw) {
    try { localStorage.setItem(KEY, fw); } catch (e) { /* storage blocked */ }
    document.querySelectorAll(".fw-group > *, .book-bar .fw-only").forEach((el) => {
      const owner = frameworkOf(el);
      if (owner) el.classList.toggle("fw-hidden", owner !== fw);
    });
    document.querySelectorAll(".fw-tab").forEach((tab) => {
      const on = tab.dataset.fw === fw;
      tab.classList.toggle("active", on);
      tab.setAttribute("aria-selected", on ? "true" : "false");
    });
    figureNumbers(fw);
  }

  // Each tab numbers its own figures and the shared ones (book_figures.py): a figure's
  // label and a reference to it carry each tab's number, and show the selected tab's.
  function figureNumbers(fw) {
    document.querySelectorAll(".fig-number").forEach((el) => {
      const number = el.dataset[fw];
      if (number) el.textContent = number;
    });
  }

  function link(href, text, cls) {
    const a = document.createElement("a");
    a.href = href;
    a.textContent = text;
    a.className = cls;
    return a;
  }

  // Pages without framework-specific content (the landing page, search) get no tab bar.
  function hasFrameworks() {
    return document.querySelector(".fw-group") !== null;
  }

  function buildBar() {
    const bar = document.createElement("div");
    bar.className = "book-bar";
    if (hasFrameworks()) {
      const label = document.createElement("span");
      label.textContent = TEXT.framework;
      bar.appendChild(label);
      bar.appendChild(tabBar());
    }
    for (const fw of FRAMEWORKS) {
      const launch = meta(`${fw}-launch`);
      if (!launch) continue;
      const a = link(launch, TEXT.launch[fw], `book-launch fw-only fw-${fw}`);
      a.target = "_blank";
      a.rel = "noopener";
      bar.appendChild(a);
      const d = link(meta(`${fw}-download`), TEXT.download(fw), `book-download fw-only fw-${fw}`);
      d.setAttribute("download", "");
      bar.appendChild(d);
    }
    // The language switch sits among the buttons of the article's header, which stays at
    // the top of the window as the page scrolls: a reader can switch at the section being
    // read (languageSwitch), not only after scrolling back to the top.
    const other = meta("other-lang-url");
    if (other) {
      const buttons = document.querySelector(".bd-header-article .article-header-buttons");
      if (buttons) buttons.prepend(languageSwitch(other));
      else bar.appendChild(languageSwitch(other));
    }
    const article = document.querySelector("article.bd-article") || document.querySelector("main");
    if (article && bar.children.length) article.insertBefore(bar, article.firstChild);
  }

  // The same page in the other edition, at the same place: both editions share their section
  // ids (book_sections.py), so the switch carries an #anchor: the one in the address while
  // its element is on the screen (a link followed to a section, a figure or an equation),
  // else the section being read, the last whose heading is in or above the top third of the
  // window (a reader who scrolled there has no #anchor). At the top of the page: none. The
  // query goes along too (a search page's ?q=). The address is kept up to date as the
  // reader scrolls, so that the link's address is right when it is copied or opened in a
  // new tab, not only when it is clicked.
  function languageSwitch(other) {
    const a = link(other, TEXT.other, "book-lang");
    a.hreflang = lang === "en" ? "zh-Hans" : "en";
    let pending = false;
    const follow = () => {
      pending = false;
      const anchor = anchorInView();
      a.href = other + location.search + (anchor ? `#${encodeURIComponent(anchor)}` : "");
    };
    const soon = () => {
      if (!pending) { pending = true; requestAnimationFrame(follow); }
    };
    follow();
    window.addEventListener("hashchange", follow);
    window.addEventListener("scroll", soon, { passive: true });
    window.addEventListener("load", follow);
    // (each before the browser follows the link, or offers to copy or open it)
    ["pointerdown", "focus", "click", "contextmenu", "touchstart"].forEach((type) =>
      a.addEventListener(type, follow, { passive: true }));
    return a;
  }

  function anchorInView() {
    const onScreen = (el) => {
      const box = el.getBoundingClientRect();
      return box.bottom > 0 && box.top < window.innerHeight && box.height + box.width > 0;
    };
    let id = "";
    try { id = decodeURIComponent(location.hash.slice(1)); } catch (e) { /* a bad escape */ }
    const target = id && document.getElementById(id);
    if (target && onScreen(target)) return id;
    const sections = Array.from(document.querySelectorAll("article section[id]"));
    const line = window.innerHeight / 3;
    let reading = null;
    for (const section of sections) {
      const heading = section.querySelector(":scope > h1, :scope > h2, :scope > h3, "
        + ":scope > h4, :scope > h5, :scope > h6") || section;
      if (heading.getBoundingClientRect().top <= line) reading = section;
    }
    // the page's own title (its outermost section) is the top of the page: no anchor
    return reading && reading !== sections[0] ? reading.id : "";
  }

  // Search results: the snippet under each hit is taken from the page's article (not the
  // theme's buttons and print-only table of contents), without its code cells and outputs
  // (searchtools.js's Search.htmlToText), without the page's title (the hit's link says it
  // already), and without what every chapter starts with: its run note, the quick answers'
  // heading and their lead-in sentence (book_ext.not_searched leaves them out of the index
  // too). A formula reads as its text (LaTeX source before MathJax runs, see texAsText).
  const NOT_IN_SNIPPETS = ["div.cell", "div.highlight", "pre", ".cell_output",
    "mjx-container", "script", "style", ".headerlink", "article h1",
    ".quick-answers > .admonition-title", ".quick-answers > .admonition-title + p",
    ".quick-answers > .fw > p:first-child"].join(", ");

  // The run note: one framework container per framework right after the title, holding
  // only a block quote.
  function runNotes(doc) {
    const notes = [];
    const title = doc.querySelector("article h1");
    for (let el = title && title.nextElementSibling; el && el.matches("div.fw")
      && el.children.length === 1 && el.firstElementChild.matches("blockquote");
      el = el.nextElementSibling) notes.push(el);
    return notes;
  }

  // A formula as plain text for a snippet: "\(2P + 12P \times n\)" reads "2P + 12P × n"
  // (symbols and Greek letters as characters, \frac{a}{b} as a/b, \text{...} as its words,
  // no backslash or brace left), so that the sentence around it keeps its words.
  const TEX_SYMBOLS = {
    times: "×", cdot: "·", approx: "≈", le: "≤", leq: "≤", ge: "≥", geq: "≥", ne: "≠",
    neq: "≠", lesssim: "≲", gtrsim: "≳", pm: "±", to: "→", rightarrow: "→", leftarrow: "←",
    infty: "∞", sum: "Σ", prod: "Π", nabla: "∇", partial: "∂", oplus: "⊕", top: "⊤",
    ell: "ℓ", lceil: "⌈", rceil: "⌉", lfloor: "⌊", rfloor: "⌋", mid: "|", ldots: "…",
    dots: "…", cdots: "…", quad: " ", qquad: " ", alpha: "α", beta: "β", gamma: "γ",
    delta: "δ", epsilon: "ε", varepsilon: "ε", eta: "η", theta: "θ", lambda: "λ", mu: "μ",
    pi: "π", rho: "ρ", sigma: "σ", tau: "τ", phi: "φ", psi: "ψ", omega: "ω", Gamma: "Γ",
    Delta: "Δ", Theta: "Θ", Lambda: "Λ", Pi: "Π", Sigma: "Σ", Phi: "Φ", Psi: "Ψ",
    Omega: "Ω",
  };
  const GROUP = "\\{((?:[^{}]|\\{[^{}]*\\})*)\\}";  // {...}, one level of braces inside

  function texAsText(tex) {
    const braced = (s) => (/^[\w.]*$/u.test(s) ? s : `(${s})`);
    let text = tex.trim().replace(/^\\[([]|\\[)\]]$/g, "");
    for (let i = 0; i < 3; i++) {  // nested: \frac{\sqrt{n}}{2}
      text = text
        .replace(new RegExp(`\\\\(?:d|t)?frac\\s*${GROUP}\\s*${GROUP}`, "g"),
          (_, a, b) => `${braced(a.trim())}/${braced(b.trim())}`)
        .replace(new RegExp(`\\\\binom\\s*${GROUP}\\s*${GROUP}`, "g"),
          (_, a, b) => `C(${a.trim()}, ${b.trim()})`)
        .replace(new RegExp(`\\\\sqrt\\s*${GROUP}`, "g"), (_, a) => `√${braced(a.trim())}`)
        .replace(new RegExp(`\\\\(?:text\\w*|math\\w+|operatorname|mbox)\\s*${GROUP}`, "g"),
          (_, a) => a)
        .replace(new RegExp(`([_^])${GROUP}`, "g"), (_, mark, a) => mark + braced(a.trim()));
    }
    return text
      .replace(/\\(left|right|big|Big|bigg|Bigg)[lr]?(?![A-Za-z])/g, "")
      .replace(/\\([A-Za-z]+)/g, (_, name) => TEX_SYMBOLS[name] ?? name)
      .replace(/\\\|/g, "‖")
      .replace(/\\([,;:! ])/g, " ")
      .replace(/\\(.)/g, "$1")
      .replace(/[{}]/g, "")
      .replace(/\s+/g, " ")
      .trim();
  }

  function snippetsWithoutCode() {
    if (typeof Search === "undefined" || !Search.htmlToText || Search.bookPatched) return;
    const htmlToText = Search.htmlToText;
    Search.htmlToText = (htmlString, anchor) => {
      const doc = new DOMParser().parseFromString(htmlString, "text/html");
      const main = doc.querySelector('[role="main"]');
      const article = main && main.querySelector("article");
      if (article) main.replaceChildren(article);
      doc.querySelectorAll(".math").forEach((el) => {
        const text = texAsText(el.textContent);
        el.replaceWith(el.matches("div") ? ` ${text} ` : text);
      });
      [...runNotes(doc), ...doc.querySelectorAll(NOT_IN_SNIPPETS)]
        .forEach((el) => el.replaceWith(" "));
      return htmlToText(doc.documentElement.outerHTML, anchor);
    };
    Search.texAsText = texAsText;  // (for the tests)
    Search.bookPatched = true;
  }

  // Figures open enlarged over the page on a click or a tap (or Enter / Space on a focused
  // figure), with their caption and a close button, which takes the focus; the button, a
  // click or tap beside the image and Escape close them. On a phone the image keeps its own
  // size and the overlay scrolls (book.css), so a tap on the image must not close it.
  const ENLARGE = { en: "Click to enlarge", zh: "点击放大" }[lang] || "Click to enlarge";

  function enlargeable() {
    document.querySelectorAll("article figure img").forEach((img) => {
      img.classList.add("fig-zoomable");
      img.tabIndex = 0;
      img.title = ENLARGE;
      img.addEventListener("click", () => enlarge(img));
      img.addEventListener("keydown", (event) => {
        if (event.key !== "Enter" && event.key !== " ") return;
        event.preventDefault();
        enlarge(img);
      });
    });
  }

  function enlarge(img) {
    const overlay = document.createElement("div");
    overlay.className = "fig-zoom";
    overlay.setAttribute("role", "dialog");
    overlay.setAttribute("aria-modal", "true");
    overlay.tabIndex = -1;
    const big = document.createElement("img");
    big.src = img.currentSrc || img.src;
    big.alt = img.alt;
    overlay.appendChild(big);
    const caption = img.closest("figure").querySelector("figcaption");
    if (caption) {
      const text = document.createElement("p");
      text.textContent = caption.textContent.replace(/#\s*$/, "").trim();
      overlay.setAttribute("aria-label", text.textContent);
      overlay.appendChild(text);
    }
    const button = document.createElement("button");
    button.type = "button";
    button.className = "fig-zoom-close";
    button.textContent = TEXT.close;
    overlay.appendChild(button);
    const close = () => {
      overlay.remove();
      document.removeEventListener("keydown", onKey);
      img.focus();
    };
    const onKey = (event) => {
      if (event.key === "Escape") close();
      else if (event.key === "Tab") { event.preventDefault(); button.focus(); }  // stays inside
    };
    overlay.addEventListener("click", (event) => { if (!onImage(big, event)) close(); });
    document.addEventListener("keydown", onKey);
    document.body.appendChild(overlay);
    button.focus();
  }

  // Whether a click falls on the drawn image: on a desktop the image is scaled to fit its
  // box (object-fit: contain), and the box's margins beside it are the backdrop.
  function onImage(img, event) {
    const box = img.getBoundingClientRect();
    const inside = (x, y, left, top, width, height) =>
      x >= left && x <= left + width && y >= top && y <= top + height;
    if (!img.naturalWidth || !img.naturalHeight) {
      return inside(event.clientX, event.clientY, box.left, box.top, box.width, box.height);
    }
    const scale = Math.min(box.width / img.naturalWidth, box.height / img.naturalHeight);
    const width = img.naturalWidth * scale;
    const height = img.naturalHeight * scale;
    return inside(event.clientX, event.clientY, box.left + (box.width - width) / 2,
      box.top + (box.height - height) / 2, width, height);
  }

  // The theme's print item in the download menu reads ".pdf", and says what it does only in
  // a tooltip, which a phone never shows: it says so itself.
  function printLabel() {
    document.querySelectorAll(".btn-download-pdf-button .btn__text-container").forEach((el) => {
      el.textContent = TEXT.print;
    });
  }

  // The theme's landmarks and the toggle buttons (made by sphinx-togglebutton when the page
  // has loaded) are labelled in English in every edition: they get the edition's words.
  function ariaLabels() {
    const labels = TEXT.aria || {};
    Object.keys(labels).forEach((english) => {
      document.querySelectorAll(`[aria-label="${english}"]`).forEach((el) => {
        el.setAttribute("aria-label", labels[english]);
      });
    });
  }

  // A link to a section that moved to another page of its chapter (a chapter split into
  // section pages) lands on the page that has it now, in the same edition: book-anchors.js
  // (book_ext.py) names each label's page. Nothing happens if the page has the id, or if
  // no other page has it (so no loop).
  function followMovedAnchor() {
    let id = "";
    try { id = decodeURIComponent(location.hash.slice(1)); } catch (e) { return; }
    const pages = window.BOOK_ANCHORS || {};
    if (!id || document.getElementById(id) || !Object.prototype.hasOwnProperty.call(pages, id)
        || pages[id] === meta("page")) return;
    location.replace(`${meta("root") || ""}${pages[id]}.html#${encodeURIComponent(id)}`);
  }

  function init() {
    followMovedAnchor();
    window.addEventListener("hashchange", followMovedAnchor);
    snippetsWithoutCode();
    enlargeable();
    printLabel();
    ariaLabels();
    window.addEventListener("load", ariaLabels);
    try { localStorage.setItem("book-lang", lang); } catch (e) { /* storage blocked */ }
    buildGroups();
    buildBar();
    select(current());
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
