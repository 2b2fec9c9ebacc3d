// protobench results site: sortable and filterable tables, Plotly figures from inert JSON, image
// downloads. No network access, no eval: everything the page shows is in the page or beside it.
"use strict";
(function () {
  function cellValue(row, index) {
    var text = row.cells[index] ? row.cells[index].textContent.trim() : "";
    var number = parseFloat(text);
    return { text: text, number: isNaN(number) ? null : number };
  }
  function sortBy(tbl, index, th) {
    var ascending = th.getAttribute("aria-sort") !== "ascending";
    tbl.querySelectorAll("th").forEach(function (h) { h.removeAttribute("aria-sort"); });
    th.setAttribute("aria-sort", ascending ? "ascending" : "descending");
    var body = tbl.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var x = cellValue(a, index), y = cellValue(b, index), order;
      if (x.number !== null && y.number !== null) { order = x.number - y.number; }
      else { order = x.text.localeCompare(y.text); }
      return ascending ? order : -order;
    });
    rows.forEach(function (r) { body.appendChild(r); });
  }
  function applyFilters(tbl, selects) {
    var shown = 0;
    Array.prototype.forEach.call(tbl.tBodies[0].rows, function (row) {
      var keep = selects.every(function (s) {
        return s.value === "" || row.cells[Number(s.dataset.column)].textContent.trim() === s.value;
      });
      row.hidden = !keep;
      if (keep) { shown += 1; }
    });
    var counter = document.getElementById(tbl.id + "-count");
    if (counter) { counter.textContent = String(shown); }
  }
  document.querySelectorAll("table.sortable").forEach(function (tbl) {
    tbl.querySelectorAll("thead th").forEach(function (th, index) {
      th.addEventListener("click", function () { sortBy(tbl, index, th); });
    });
    var selects = Array.prototype.slice.call(document.querySelectorAll('select[data-table="' + tbl.id + '"]'));
    selects.forEach(function (s) { s.addEventListener("change", function () { applyFilters(tbl, selects); }); });
  });
  if (typeof Plotly !== "undefined") {
    document.querySelectorAll('script[type="application/json"][data-figure]').forEach(function (node) {
      var spec = JSON.parse(node.textContent);
      var target = document.getElementById(node.dataset.figure);
      Plotly.newPlot(target, spec.data, spec.layout, { responsive: true, displaylogo: false }).then(function () {
        target.dataset.rendered = "yes";
      });
    });
    document.querySelectorAll("button[data-download]").forEach(function (button) {
      button.addEventListener("click", function () {
        Plotly.downloadImage(document.getElementById(button.dataset.for),
                             { format: button.dataset.download, filename: button.dataset.for });
      });
    });
  }
  document.documentElement.dataset.siteReady = "yes";
}());
