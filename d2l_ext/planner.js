// The planner of d2l_ext/planner.py as a calculator in the page: the same formulas, with the
// pipeline's in-flight micro-batches and idle share in closed form (checked against the
// Python simulator in tests/test_planner.py and against plan() in tests/test_site.py).
// It fills every element with class "planner-calculator" that d2l_ext/planner_widget.py
// wrote; the texts come from that element's data-labels (English or Chinese).
(function () {
  "use strict";

  function fill(template, values) {
    return template.replace(/\{(\w+)\}/g, function (_, key) { return String(values[key]); });
  }

  function modelOf(v) {
    var m = {
      layers: v.layers, hidden: v.hidden, heads: v.heads, vocab: v.vocab,
      ffn: v.ffn || 4 * v.hidden, kv: v.kv_heads || v.heads, swiglu: v.mlp === "swiglu",
      tied: v.tied, experts: v.experts, topK: v.top_k, dropout: v.dropout, flash: v.flash
    };
    m.attention = 2 * m.hidden * m.hidden + 2 * m.hidden * Math.floor(m.hidden * m.kv / m.heads);
    m.expert = (m.swiglu ? 3 : 2) * m.hidden * m.ffn;
    m.embedding = (m.tied ? 1 : 2) * m.vocab * m.hidden;
    m.active = m.layers * (m.attention + m.topK * m.expert) + m.vocab * m.hidden;
    return m;
  }

  // Why the inputs cannot run, in the reader's language, or null.
  function refusal(v, text) {
    var ints = ["layers", "hidden", "heads", "vocab", "dp", "tp", "pp", "micro_batch",
                "micro_batches", "chunks", "cp", "ep", "experts", "top_k", "seq"];
    for (var i = 0; i < ints.length; i++) {
      var x = v[ints[i]];
      if (!Number.isInteger(x) || x < 1) return fill(text.at_least_one, {name: text.titles[ints[i]]});
    }
    var defaults = ["kv_heads", "ffn"];
    for (var j = 0; j < defaults.length; j++) {
      var y = v[defaults[j]];
      if (!Number.isInteger(y) || y < 0) return fill(text.at_least_zero, {name: text.titles[defaults[j]]});
    }
    if (!(v.efficiency > 0 && v.efficiency <= 1)) return text.efficiency;
    if (!(v.headroom >= 0 && v.headroom < 1)) return text.headroom;
    var kv = v.kv_heads || v.heads;
    if (v.heads % kv) return fill(text.kv_heads, {kv: kv, heads: v.heads});
    if (v.hidden % v.heads) return fill(text.hidden_heads, v);
    if (v.top_k > v.experts) return fill(text.top_k, v);
    if (v.dp % v.ep) return fill(text.ep_dp, v);
    if (v.heads % v.tp || kv % v.tp) return fill(text.tp_heads, {tp: v.tp, heads: v.heads, kv: kv});
    var chunks = v.pp * (v.schedule === "interleaved" ? v.chunks : 1);
    if (v.layers % chunks) return fill(text.layers_pp, {layers: v.layers, n: chunks});
    if (v.experts % v.ep) return fill(text.ep_experts, v);
    if (v.seq % v.cp) return fill(text.cp_seq, v);
    if (v.schedule === "interleaved" && v.pp > 1 && v.micro_batches % v.pp)
      return fill(text.interleaved, v);
    return null;
  }

  function activationBytes(m, v, recompute) {
    var s = v.seq / v.cp, b = v.micro_batch, h = m.hidden, t = v.tp;
    var whole = v.sp ? t : 1;
    if (recompute === "full") return 2 * s * b * h / whole;
    var inner = (m.swiglu ? 3 : 2) * 2 * m.topK * m.ffn / h;
    var splitPart = 4 + 4 * m.kv / m.heads + inner;
    var wholePart = m.dropout ? 10 : 8;
    var attention = (m.flash || recompute === "selective") ? 0 : (m.dropout ? 5 : 2) * m.heads * v.seq / h;
    return s * b * h * (wholePart / whole + (splitPart + attention) / t);
  }

  function zeroBytes(stage, k) {  // d2l_ext.memory_budget.zero_bytes_per_parameter
    var kept = [2, 2, 12].slice(0, 3 - stage), shards = [12, 2, 2].slice(0, stage);
    var sum = function (a) { return a.reduce(function (x, y) { return x + y; }, 0); };
    return sum(kept) + sum(shards) / k;
  }

  function pipelineOf(v) {  // [idle share, micro-batches the busiest stage holds]
    var p = v.pp, n = v.micro_batches;
    if (p === 1) return [0, 1];
    var c = v.schedule === "interleaved" ? v.chunks : 1;
    var idle = (p - 1) / (c * n + p - 1);
    if (v.schedule === "gpipe") return [idle, n];
    if (v.schedule === "1f1b") return [idle, Math.min(p, n)];
    return [idle, Math.ceil(Math.min(c * n, (c + 1) * p - 1) / c)];
  }

  // The same parts, under the same names, as d2l_ext.planner.plan.
  function plan(v, hw) {
    var m = modelOf(v), out = {memory: {}, time: {}};
    var layers = v.layers / v.pp, full = v.recompute === "full";
    var embeddings = m.embedding / (m.tied || v.pp === 1 ? 1 : 2);
    var dense = (layers * m.attention + embeddings) / v.tp;
    var experts = layers * m.experts * m.expert / (v.tp * v.ep);
    var replicas = v.dp * v.cp, gpus = v.dp * v.tp * v.pp * v.cp;
    var pipe = pipelineOf(v);
    out.memory["weights, gradients, optimizer"] = dense * zeroBytes(v.zero, replicas)
      + experts * zeroBytes(v.zero, replicas / v.ep);
    out.memory["activations"] = activationBytes(m, v, v.recompute) * layers * pipe[1];
    var loss = (v.tp > 1 ? 16 : 12) * v.seq / v.cp * v.micro_batch * m.vocab / v.tp;
    out.memory["loss (float32 logits)"] = loss;
    if (full) out.memory["recomputed layer, beyond the loss"] = Math.max(
      0, activationBytes(m, v, "none") - loss);
    var tokens = v.micro_batch * v.micro_batches * v.seq;
    var flopsPerToken = 6 * m.active + 12 * m.layers * v.seq * m.hidden;
    var compute = flopsPerToken * tokens / (v.tp * v.pp * v.cp) * (full ? 4 / 3 : 1)
      / (hw.peak * v.efficiency);
    if (v.pp > 1) out.time["pipeline bubble"] = compute * pipe[0] / (1 - pipe[0]);
    out.time["compute"] = compute;
    if (v.tp > 1) {
      var payload = v.micro_batch * v.seq / v.cp * m.hidden * 2;
      var link = v.tp <= hw.per_node ? hw.intra : hw.inter;
      var one = 2 * (v.tp - 1) * hw.alpha + 2 * (v.tp - 1) / v.tp * payload / link;
      out.time["tensor-parallel collectives"] = layers * v.micro_batches * (full ? 6 : 4) * one;
    }
    if (v.cp > 1) {
      var s = v.seq / v.cp, replay = full ? 4 / 3 : 1;
      var kvBytes = 2 * v.micro_batch * s * m.hidden * m.kv / m.heads * 2 / v.tp;
      var cpLink = v.cp * v.tp <= hw.per_node ? hw.intra : hw.inter;
      var sends = 3 * replay * (v.cp - 1) * (hw.alpha + kvBytes / cpLink);
      var attention = replay * 12 * v.seq * m.hidden * v.micro_batch * s / v.tp
        / (hw.peak * v.efficiency);
      out.time["context-parallel ring (exposed)"] = layers * v.micro_batches
        * Math.max(0, sends - attention);
    }
    if (replicas > 1) {
      var dpLink = v.tp * v.cp * v.dp <= hw.per_node ? hw.intra : hw.inter;
      var groups = v.ep === 1 ? [[dense + experts, replicas]]
        : [[dense, replicas], [experts, replicas / v.ep]];
      var half = function (messages) {  // a reduce-scatter or an all-gather of every group
        return groups.reduce(function (a, g) {
          var k = g[1];
          return k > 1 && g[0] ? a + messages * (k - 1) * hw.alpha + g[0] * 2 * (k - 1) / k / dpLink : a;
        }, 0);
      };
      var n = v.micro_batches, backward = compute * 2 / 3 / n, exposed;
      if (v.zero === 3) exposed = n * Math.max(0, 3 * half(layers) - compute / n);
      else if (v.zero === 2) exposed = (n - 1) * Math.max(0, half(1) - backward)
        + Math.max(0, 2 * half(1) - backward);
      else exposed = Math.max(0, 2 * half(1) - backward);
      out.time["data-parallel collectives (exposed)"] = exposed;
    }
    var sum = function (o) { return Object.keys(o).reduce(function (a, k) { return a + o[k]; }, 0); };
    out.totalMemory = sum(out.memory);
    out.stepTime = sum(out.time);
    out.tokensPerGpuSecond = tokens * v.dp / gpus / out.stepTime;
    out.mfu = out.tokensPerGpuSecond * flopsPerToken / hw.peak;
    out.gpus = gpus;
    out.parameters = m.layers * (m.attention + m.experts * m.expert) + m.embedding;
    return out;
  }

  function read(form) {
    var v = {};
    Array.prototype.forEach.call(form.querySelectorAll("[name]"), function (el) {
      if (el.type === "checkbox") v[el.name] = el.checked;
      else if (el.tagName === "SELECT" || el.dataset.kind === "text") v[el.name] = el.value;
      else v[el.name] = Number(el.value);
    });
    v.zero = Number(v.zero);
    return v;
  }

  function row(name, value, raw, key) {
    return "<tr><td>" + name + "</td><td data-key=\"" + key + "\" data-value=\"" + raw + "\">"
      + value + "</td></tr>";
  }

  function render(root) {
    var text = JSON.parse(root.dataset.labels);
    var presets = JSON.parse(root.dataset.presets);
    var hardware = JSON.parse(root.dataset.hardware);
    var form = root.querySelector("form"), result = root.querySelector(".planner-result");
    function update() {
      var v = read(form), why = refusal(v, text);
      if (why) {
        result.innerHTML = "<p class=\"planner-error\">" + why + "</p>";
        return;
      }
      var hw = hardware[v.hardware], p = plan(v, hw), gib = Math.pow(2, 30), html = [];
      html.push("<table class=\"planner-memory\"><tr><th>" + text.memory + "</th><th>GiB</th></tr>");
      Object.keys(p.memory).forEach(function (k) {
        html.push(row(text.parts[k], (p.memory[k] / gib).toFixed(2), p.memory[k], k));
      });
      html.push(row("<b>" + text.total + "</b>", "<b>" + (p.totalMemory / gib).toFixed(2)
        + "</b>", p.totalMemory, "total"));
      html.push("</table><table class=\"planner-time\"><tr><th>" + text.time + "</th><th>"
        + text.seconds + "</th></tr>");
      Object.keys(p.time).forEach(function (k) {
        html.push(row(text.parts[k], p.time[k].toFixed(3), p.time[k], k));
      });
      html.push(row("<b>" + text.step + "</b>", "<b>" + p.stepTime.toFixed(3) + "</b>",
        p.stepTime, "step"));
      html.push("</table>");
      var fits = p.totalMemory <= hw.memory * (1 - v.headroom);
      html.push("<p class=\"planner-verdict\" data-fits=\"" + fits + "\">" + fill(
        fits ? text.fits : text.does_not_fit, {
          gpus: p.gpus, gpu: v.hardware, memory: (hw.memory / 1e9).toFixed(0),
          free: Math.round(100 * v.headroom),
          tokens: Math.round(p.tokensPerGpuSecond).toLocaleString("en-US"),
          mfu: (100 * p.mfu).toFixed(1), params: (p.parameters / 1e9).toFixed(2)
        }) + "</p>");
      result.innerHTML = html.join("");
    }
    root.querySelector("select[name=preset]").addEventListener("change", function (e) {
      var preset = presets[e.target.value];
      Object.keys(preset).forEach(function (k) {
        var el = form.querySelector("[name=" + k + "]");
        if (el.type === "checkbox") el.checked = preset[k]; else el.value = preset[k];
      });
      update();
    });
    form.addEventListener("input", update);
    form.addEventListener("change", update);
    form.addEventListener("submit", function (e) { e.preventDefault(); });
    update();
    root.dataset.ready = "true";
  }

  function start() {
    Array.prototype.forEach.call(document.querySelectorAll(".planner-calculator"), function (root) {
      if (!root.dataset.ready) render(root);
    });
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
