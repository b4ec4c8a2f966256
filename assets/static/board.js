/* collab-lease: the board's script. The page works without it; with it,
 * the times count down, the rows sort in place when they all fit on the
 * page, and the page stays current: it follows each repository's lease
 * events (the badges' stream; the browser resumes it with Last-Event-ID
 * after a drop) and, on any event, a "reset" included, fetches itself
 * again and swaps its content in. Streams past the sidecar's per-viewer
 * cap are not opened: such a board is fetched again every half minute.
 * ES2017, no build. */
(function () {
  'use strict';
  var main = document.getElementById('board');
  if (!main || !window.fetch || !window.DOMParser) return;
  var base = main.dataset.base, streams = {}, open = 0, timer = 0, busy = 0, again = 0;
  var MAX_STREAMS = 6, POLL = 30000, SOON = 300000;

  function pad(n) { return n < 10 ? '0' + n : '' + n; }

  // span renders ms as the server does (routes/board.go): two units.
  function span(ms) {
    var s = Math.max(0, Math.floor(ms / 1000)), m = Math.floor(s / 60), h = Math.floor(m / 60), d = Math.floor(h / 24);
    return d ? d + 'd ' + (h % 24) + 'h' : h ? h + 'h ' + pad(m % 60) + 'm' : m ? m + 'm ' + pad(s % 60) + 's' : s + 's';
  }

  function each(sel, f) { Array.prototype.forEach.call(main.querySelectorAll(sel), f); }

  function tick() {
    var now = Date.now(), ended = 0;
    each('[data-left]', function (e) {
      var left = Number(e.dataset.left) - now;
      e.textContent = left > 0 ? span(left) : 'expired';
      e.classList.toggle('cl-soon', left > 0 && left < SOON);
      e.classList.toggle('cl-over', left <= 0);
      if (left <= 0 && !e.dataset.over) ended = e.dataset.over = 1;
    });
    each('[data-age], [data-ago]', function (e) { e.textContent = span(now - Number(e.dataset.age || e.dataset.ago)); });
    if (ended) refresh(); // the claim's end is on its way as an event; look anyway
  }

  // refresh fetches the page again, soon, one fetch at a time, and swaps
  // its content in.
  function refresh() {
    if (busy) { again = 1; return; }
    clearTimeout(timer);
    timer = setTimeout(function () {
      busy = 1;
      fetch(location.href, { credentials: 'same-origin', headers: { Accept: 'text/html' } }).then(function (r) {
        return r.ok ? r.text() : null;
      }).then(function (html) {
        var next = html && new DOMParser().parseFromString(html, 'text/html').getElementById('board');
        if (next) {
          main.innerHTML = next.innerHTML;
          main.dataset.sort = next.dataset.sort;
          tick();
          listenAll();
        }
      }).catch(function () {}).then(function () {
        busy = 0;
        if (again) { again = 0; refresh(); }
      });
    }, 100);
  }

  function live() {
    var el = document.getElementById('cl-live'), n = Object.keys(streams).length;
    if (!el) return;
    el.dataset.live = n && open === n ? 1 : 0;
    el.textContent = n && open === n ? 'live' : n ? 'reconnecting' : '';
  }

  // listen follows repo's lease events. The first opening fetches the page
  // again (what changed between its rendering and the stream's start); the
  // browser reconnects by itself after a drop, resuming where it was.
  function listen(repo) {
    if (streams[repo] || !window.EventSource || Object.keys(streams).length >= MAX_STREAMS) return;
    var es = streams[repo] = new EventSource(base + '/api/v1/repos/' + repo + '/leases/events', { withCredentials: true }), up = 0, first = 1;
    es.onopen = function () {
      if (!up) open++;
      up = 1;
      if (first) refresh();
      first = 0;
      live();
    };
    es.onerror = function () {
      if (up) open--;
      up = 0;
      live();
      if (es.readyState !== 2) return;
      // Refused (the repository is gone from the viewer, or too many
      // streams): try again later, and look then.
      delete streams[repo];
      setTimeout(function () { listen(repo); }, POLL);
    };
    ['lease', 'released', 'reset', 'reserved', 'unreserved'].forEach(function (type) { es.addEventListener(type, refresh); });
  }

  function listenAll() {
    each('section[data-repo]', function (s) { listen(s.dataset.repo); });
    live();
  }

  // Sorting: the links sort on the server (and work without script); when
  // every claim of each table is on the page, the rows are sorted here.
  function key(tr, by) {
    if (by === 'holder') return tr.dataset.holder.toLowerCase();
    if (by === 'issue') return Number(tr.dataset.issue);
    if (by === 'age') return Number(tr.dataset.since);
    return tr.dataset.expires ? Number(tr.dataset.expires) : Infinity;
  }

  function sortRows(sort) {
    var desc = sort.charAt(0) === '-', by = sort.replace(/^-/, '');
    each('section[data-repo] > .cl-box > table > tbody', function (tb) {
      if (!tb.rows[0] || !tb.rows[0].dataset.issue) return;
      var rows = Array.prototype.slice.call(tb.rows);
      rows.sort(function (a, b) {
        var x = key(a, by), y = key(b, by), c = x < y ? -1 : x > y ? 1 : Number(a.dataset.issue) - Number(b.dataset.issue);
        return desc ? -c : c;
      });
      rows.forEach(function (r) { tb.appendChild(r); });
    });
  }

  main.addEventListener('click', function (ev) {
    var a = ev.target.closest && ev.target.closest('a[data-sort]');
    if (!a || ev.button || ev.metaKey || ev.ctrlKey || ev.shiftKey) return;
    var fits = true;
    each('section[data-pages]', function (s) { fits = fits && s.dataset.pages === '1'; });
    if (!fits) return; // the server sorts across pages
    ev.preventDefault();
    var u = new URL(a.href, location.href), sort = u.searchParams.get('sort');
    history.replaceState(null, '', u.search);
    main.dataset.sort = sort;
    sortRows(sort);
    var cur = sort.replace(/^-/, '');
    each('a[data-sort]', function (l) {
      var q = new URL(l.href, location.href), k = l.dataset.sort;
      q.searchParams.set('sort', cur === k && sort.charAt(0) !== '-' ? '-' + k : k);
      l.href = q.search;
      if (l.parentNode.classList.contains('cl-sorts')) {
        if (k === cur) l.setAttribute('aria-current', 'true');
        else l.removeAttribute('aria-current');
        l.textContent = k + (k === cur ? (sort.charAt(0) === '-' ? ' \u2191' : ' \u2193') : '');
      }
    });
  });

  setInterval(tick, 1000);
  setInterval(function () { if (Object.keys(streams).length < main.querySelectorAll('section[data-repo]').length) refresh(); }, POLL);
  tick();
  listenAll();
})();
