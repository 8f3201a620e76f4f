/* memrisk window explorer: a Tabulator table of every window (virtual rows, sort, header filters, text search) and the
   window's detail (prefix, target, greedy and CBS candidates diffed against the target, per-token probabilities).
   The data comes from the script element of class memrisk-explorer-data with data-key K (gzip-compressed JSON in
   base64, inflated with the browser's DecompressionStream); the URL fragment
   #window=K:ID keeps the open window, so a link to it can be shared. Everything is built with textContent: text from
   corpora and models is never parsed as markup. */
(function () {
  "use strict";
  const PREFIX = "window=";
  const ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  const PACK_IMPOSSIBLE = 4095;

  function unpack(packed) {  /* two characters a token: −(log10 p in hundredths), 4095 for p = 0 (explorer.py) */
    const values = [];
    for (let i = 0; i < packed.length; i += 2) {
      const code = ALPHABET.indexOf(packed[i]) * 64 + ALPHABET.indexOf(packed[i + 1]);
      values.push(code === PACK_IMPOSSIBLE ? null : -code);
    }
    return values;
  }
  const explorers = {};

  function el(name, className, text) {
    const node = document.createElement(name);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = text;
    return node;
  }

  function log10Text(value) {
    return value === null || value === undefined ? "−∞" : value.toFixed(2);
  }

  function closenessText(value) {  /* counts as they are, ratios to 3 decimals (explorer.py) */
    return value === null || value === undefined ? "—" : (Number.isInteger(value) ? String(value) : value.toFixed(3));
  }

  function numberSorter(a, b) {
    const x = a === null || a === undefined ? -Infinity : a;
    const y = b === null || b === undefined ? -Infinity : b;
    return x === y ? 0 : (x < y ? -1 : 1);
  }

  function atLeast(headerValue, rowValue) {
    if (headerValue === "" || headerValue === null) return true;
    const bound = Number(headerValue);
    const value = rowValue === null || rowValue === undefined ? -Infinity : rowValue;
    return value >= bound;
  }

  function column(spec) {
    const col = { title: spec.title, field: spec.field, headerTooltip: spec.title };
    if (spec.kind === "text") {
      const listed = ["dataset", "role", "class"].includes(spec.field);
      col.headerFilter = listed ? "list" : "input";
      if (listed) col.headerFilterParams = { valuesLookup: true, clearable: true };
      col.headerFilterPlaceholder = listed ? "all" : "contains";
      if (!listed) { col.width = 260; col.tooltip = true; }
    } else {
      col.sorter = numberSorter;
      col.hozAlign = "right";
      col.headerFilter = "number";
      col.headerFilterPlaceholder = "≥";
      col.headerFilterFunc = atLeast;
      if (spec.kind === "log10") col.formatter = (cell) => log10Text(cell.getValue());
      if (spec.kind === "number") col.formatter = (cell) => { const v = cell.getValue(); return v === null ? "—" : v.toPrecision(3); };
    }
    return col;
  }

  async function inflate(base64) {
    const bytes = Uint8Array.from(atob(base64.trim()), (c) => c.charCodeAt(0));
    const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
    return JSON.parse(await new Response(stream).text());
  }

  function Explorer(key, data) {
    this.key = key;
    this.data = data;
    const fields = this.data.fields;
    this.data.rows = this.data.rows.map((values) => Object.fromEntries(fields.map((field, i) => [field, values[i]])));
    this.byId = new Map(this.data.rows.map((row, i) => [row.id, i]));
    this.data.rows.forEach((row, i) => {
      const d = this.data.details[i];
      if (this.data.pieces) {
        row.prefix = this.units(d.prefix).join("");
        row.suffix = this.units(d.target).join("");
      } else {
        d.prefix = row.prefix;
        d.target = row.suffix;
      }
    });
    this.root = document.getElementById("explorer-" + this.key);
    this.detail = this.root.querySelector(".window-detail");
    const search = this.root.querySelector(".explorer-search");
    this.table = new Tabulator(this.root.querySelector(".explorer-table"), {
      data: this.data.rows,
      index: "id",
      nestedFieldSeparator: false,
      height: "440px",
      layout: "fitDataStretch",
      columns: [{ title: "window", field: "id", headerFilter: "input", headerFilterPlaceholder: "contains", frozen: true }]
        .concat(this.data.columns.map(column)),
      placeholder: "no window matches these filters",
    });
    this.table.on("rowClick", (event, row) => this.open(row.getData().id, true));
    this.table.on("dataFiltered", (filters, rows) => {
      this.root.querySelector(".explorer-count").textContent = rows.length + " of " + this.data.rows.length + " windows";
    });
    search.addEventListener("input", () => {
      const query = search.value.trim().toLowerCase();
      if (!query) { this.table.clearFilter(); return; }
      this.table.setFilter((row) => (row.id + "\n" + row.prefix + "\n" + row.suffix).toLowerCase().includes(query));
    });
    this.built = new Promise((resolve) => this.table.on("tableBuilt", resolve));
  }

  Explorer.prototype.units = function (sequence) {
    const pieces = this.data.pieces;
    if (typeof sequence === "string") return Array.from(sequence);
    return sequence.map((id) => (pieces && pieces[id] !== undefined ? pieces[id] : "⟨" + id + "⟩"));
  };

  Explorer.prototype.tokens = function (units, className, title) {
    const span = el("span", className);
    if (title) span.title = title;
    units.forEach((unit) => span.appendChild(el("span", "tok", unit)));
    return span;
  };

  Explorer.prototype.diff = function (target, edits) {
    const a = this.units(target);
    const box = el("div", "text diff");
    let at = 0;
    edits.forEach(([a0, a1, inserted]) => {
      if (a0 > at) box.appendChild(this.tokens(a.slice(at, a0), "match"));
      if (a1 > a0) box.appendChild(this.tokens(a.slice(a0, a1), "missing", "in the target, not generated"));
      if (inserted.length) box.appendChild(this.tokens(this.units(inserted), "added", "generated, not in the target"));
      at = a1;
    });
    if (at < a.length) box.appendChild(this.tokens(a.slice(at), "match"));
    return box;
  };

  Explorer.prototype.strip = function (label, values, target) {
    const row = el("div", "strip");
    row.appendChild(el("span", "label", label + " "));
    const units = typeof target === "string" ? values.map((_, i) => " " + (i + 1) + " ") : this.units(target);
    values.forEach((value, i) => {
      const p = value === null ? 0 : Math.pow(10, value / 100);
      const cell = el("span", "tok prob", units[i] !== undefined ? units[i] : "·");
      cell.style.background = value === null ? "#ddd" : "hsl(" + Math.round(120 * p) + ",70%,80%)";
      cell.title = "token " + (i + 1) + ": log10 p = " + log10Text(value === null ? null : value / 100) + " (p = " + p.toPrecision(3) + ")";
      row.appendChild(cell);
    });
    return row;
  };

  Explorer.prototype.render = function (id) {
    const index = this.byId.get(id);
    const box = this.detail;
    box.replaceChildren();
    if (index === undefined) {
      box.appendChild(el("p", "note", "No window " + id + " in this run."));
      return;
    }
    const row = this.data.rows[index], d = this.data.details[index];
    box.appendChild(el("h4", null, row.id));
    box.appendChild(el("p", "note", row.dataset + " (" + row.role + ") · " + row["class"]));
    box.appendChild(el("div", "label", "prefix"));
    box.appendChild(this.tokens(this.units(d.prefix), "text prefix"));
    box.appendChild(el("div", "label", "target suffix"));
    box.appendChild(this.tokens(this.units(d.target), "text"));
    if (d.greedy) {
      box.appendChild(el("div", "label", "greedy continuation against the target"));
      box.appendChild(this.diff(d.target, d.greedy));
    }
    if (d.greedy_closeness) {
      const names = this.data.closeness;
      box.appendChild(el("p", "note closeness", "closeness: " +
        d.greedy_closeness.map((v, i) => names[i] + " " + closenessText(v)).join(" · ")));
    }
    if (d.candidates && d.candidates.length) {
      box.appendChild(el("div", "label", "top " + d.candidates.length + " CBS candidates against the target"));
      const table = el("table", "candidates");
      const head = el("tr");
      const close = d.candidate_closeness || [];
      const closeNames = close.length ? this.data.closeness : [];
      ["#", "log10 p", "Levenshtein", "Hamming"].concat(closeNames, ["candidate (diff against the target)"])
        .forEach((h) => head.appendChild(el("th", null, h)));
      table.appendChild(head);
      d.candidates.forEach(([log10p, levenshtein, hamming, edits], i) => {
        const tr = el("tr");
        [String(i + 1), log10Text(log10p === null ? null : log10p / 100), String(levenshtein), String(hamming)]
          .concat((close[i] || []).map(closenessText))
          .forEach((v) => tr.appendChild(el("td", "num", v)));
        const cell = el("td");
        cell.appendChild(this.diff(d.target, edits));
        tr.appendChild(cell);
        table.appendChild(tr);
      });
      box.appendChild(table);
    }
    const policies = Object.keys(d.token_log10_p || {});
    if (policies.length) {
      box.appendChild(el("div", "label", "probability of each target token, per policy (green: likely, red: unlikely, grey: impossible)"));
      policies.forEach((policy) => box.appendChild(this.strip(policy, unpack(d.token_log10_p[policy]), d.target)));
    }
  };

  Explorer.prototype.open = function (id, remember) {
    if (remember) history.replaceState(null, "", "#" + PREFIX + this.key + ":" + encodeURIComponent(id));
    this.render(id);
    this.built.then(() => {
      this.table.deselectRow();
      if (this.byId.has(id)) { this.table.selectRow(id); this.table.scrollToRow(id, "center", false).catch(() => {}); }
    });
  };

  /* A study page shows one cell's explorer at a time (select.explorer-picker); showing another redraws its table,
     which Tabulator cannot lay out while hidden. */
  function show(key) {
    const picker = document.querySelector("select.explorer-picker");
    if (!picker) return;
    picker.value = key;
    Object.values(explorers).forEach((explorer) => {
      const hidden = explorer.key !== key;
      if (explorer.root.hidden !== hidden) {
        explorer.root.hidden = hidden;
        if (!hidden) explorer.built.then(() => explorer.table.redraw(true));
      }
    });
  }

  function reveal(explorer, id, remember) {
    show(explorer.key);
    explorer.open(id, remember);
    explorer.root.scrollIntoView();
  }

  function fromFragment() {
    const hash = decodeURIComponent(location.hash.slice(1));
    if (!hash.startsWith(PREFIX)) return;
    const rest = hash.slice(PREFIX.length), colon = rest.indexOf(":");
    const explorer = explorers[rest.slice(0, colon)];
    if (explorer) reveal(explorer, rest.slice(colon + 1), false);
  }

  window.memriskOpenWindow = function (key, id) {
    const explorer = explorers[key];
    if (explorer) reveal(explorer, id, true);
  };

  const loading = Array.from(document.querySelectorAll("script.memrisk-explorer-data")).map((script) =>
    inflate(script.textContent).then((data) => { explorers[script.dataset.key] = new Explorer(script.dataset.key, data); }));
  Promise.all(loading).then(() => {
    const picker = document.querySelector("select.explorer-picker");
    if (picker) picker.addEventListener("change", () => show(picker.value));
    window.addEventListener("hashchange", fromFragment);
    fromFragment();
  }).catch((error) => console.error("the window explorer could not read its data: " + error));
})();
