/* collab-lease: draws "claimed by alice · 12m left" badges into Gitea's
 * issue lists and issue pages. It reads the live leases of the numbers on
 * the page from the sidecar that served this script, then follows the
 * repository's lease events, and draws nothing (and logs nothing) where
 * nothing is claimed or the sidecar is unreachable. Plain ES2017, no
 * dependencies, no build step. */
(function () {
  'use strict';
  var me = document.currentScript;
  if (!me || !window.fetch || !window.MutationObserver) return;
  // The sidecar's base URL: where this script came from, minus /assets/….
  var base = (me.getAttribute('data-collab-lease-url') || me.src.replace(/\/assets\/[^/]*$/, '')).replace(/\/$/, '');
  var REFRESH_MS = 30000;
  var MAX_ISSUES = 50;
  var repos = {}; // "owner/repo" -> what we know of its leases, and its event stream
  var session = null; // promise of {login, sign_in_url} from the sidecar

  function get(path) {
    return fetch(base + path, { credentials: 'include', headers: { Accept: 'application/json' } });
  }

  function st(repo) {
    return repos[repo] || (repos[repo] = { by: {}, seen: {}, at: 0, v: 0, wait: 0 });
  }

  // load asks for the live leases of these numbers of repo, 50 a request
  // (?issue=…, so the answer does not grow with the repository; unchanged
  // answers are 304s), and resolves to {ok} or {status}; a failure is
  // remembered as long as an answer. An answer that an event may have
  // overtaken is not kept: asked again.
  function load(repo, nums) {
    var s = st(repo), v = s.v, asks = [];
    for (var i = 0; i < nums.length; i += MAX_ISSUES) {
      var q = nums.slice(i, i + MAX_ISSUES).map(function (n) { return 'issue=' + n; }).join('&');
      asks.push(get('/api/v1/repos/' + repo + '/leases?' + q).then(function (r) {
        return r.ok ? r.json() : { status: r.status };
      }));
    }
    return Promise.all(asks).then(function (parts) {
      s.at = Date.now();
      for (var k = 0; k < parts.length; k++) if (!parts[k].leases) return { status: s.err = parts[k].status };
      s.err = 0;
      if (s.v !== v) return { ok: true, again: true };
      nums.forEach(function (n) { delete s.by[n]; s.seen[n] = true; });
      parts.forEach(function (p) { p.leases.forEach(function (l) { s.by[l.issue] = l; }); });
      return { ok: true };
    }).catch(function () { s.at = Date.now(); return { status: s.err = -1 }; });
  }

  // listen keeps repo's badges current while the page is visible: each
  // event changes what we know and redraws. When the sidecar refuses the
  // stream, it is tried again later, ever more slowly; meanwhile (and
  // without EventSource) the badges are polled every half minute.
  function listen(repo) {
    var s = st(repo);
    if (s.es || s.timer || document.hidden || !window.EventSource) return;
    var es = s.es = new EventSource(base + '/api/v1/repos/' + repo + '/leases/events', { withCredentials: true });
    es.onopen = function () { s.live = true; s.wait = 0; s.seen = {}; schedule(); };
    es.onerror = function () {
      s.live = false;
      if (es.readyState !== 2) return; // the browser reconnects by itself
      es.close();
      s.es = null;
      s.wait = Math.min(2 * (s.wait || 1000), 60000);
      s.timer = setTimeout(function () { s.timer = 0; listen(repo); }, s.wait);
    };
    function on(type, f) {
      es.addEventListener(type, function (e) { s.v++; f(JSON.parse(e.data)); schedule(); });
    }
    on('lease', function (l) { s.by[l.issue] = l; });
    on('released', function (d) { delete s.by[d.issue]; });
    on('reset', function () { s.seen = {}; });
  }

  function quiet() {
    Object.keys(repos).forEach(function (r) {
      var s = repos[r];
      if (s.es) s.es.close();
      clearTimeout(s.timer);
      s.es = null;
      s.timer = 0;
      s.live = false;
    });
  }

  function signedIn() {
    if (!session) {
      session = get('/api/v1/session').then(function (r) {
        return r.ok ? r.json() : {};
      }).catch(function () { return {}; });
    }
    return session;
  }

  // target parses ".../owner/repo/(issues|pulls)/N" (any sub-path before it).
  function target(href) {
    var m = /\/([^/]+)\/([^/]+)\/(?:issues|pulls)\/(\d+)\/?$/.exec(new URL(href, location.href).pathname);
    return m ? { repo: decodeURIComponent(m[1]) + '/' + decodeURIComponent(m[2]), issue: Number(m[3]) } : null;
  }

  function remaining(ms) {
    var m = Math.floor(ms / 60000);
    if (m < 1) return '<1m left';
    if (m < 60) return m + 'm left';
    var h = Math.floor(m / 60);
    if (h < 48) return h + 'h ' + (m % 60) + 'm left';
    return Math.floor(h / 24) + 'd left';
  }

  // text is the badge's words for lease l now, or null once it has expired.
  function text(l) {
    if (l.expires_at === null) return 'assigned to ' + l.holder;
    var left = Date.parse(l.expires_at) - Date.now();
    return left > 0 ? 'claimed by ' + l.holder + ' \u00b7 ' + remaining(left) : null;
  }

  // draw puts the badge for lease l (or none) after anchor, touching the
  // DOM only when something changed, so our own edits do not re-trigger us.
  function draw(anchor, l) {
    var next = anchor.nextElementSibling;
    var have = next && next.classList.contains('collab-lease-badge') ? next : null;
    var words = l ? text(l) : null;
    if (!words) {
      if (have) have.remove();
      return;
    }
    if (have && have.textContent === words) return;
    if (!have) {
      have = document.createElement('span');
      have.className = 'collab-lease-badge' + (l.expires_at === null ? ' collab-lease-open' : '');
      anchor.insertAdjacentElement('afterend', have);
    }
    have.textContent = words;
    have.title = 'collab-lease: token ' + l.token + (l.expires_at ? ', until ' + new Date(l.expires_at).toLocaleString() : ', open-ended');
    have.dataset.collabLeaseIssue = String(l.issue);
  }

  function signInLink(where, repo, signInURL) {
    if (document.querySelector('.collab-lease-signin')) return;
    var div = document.createElement('div');
    div.className = 'collab-lease-signin';
    var a = document.createElement('a');
    a.href = signInURL + '?return_to=' + encodeURIComponent(location.href);
    a.textContent = 'sign in to see claims';
    a.title = 'Claims on ' + repo + ' are shown to people who may read it';
    div.appendChild(a);
    where.insertAdjacentElement('beforebegin', div);
  }

  // Each place a badge goes: an anchor element, its repo and issue number.
  function places() {
    var out = [];
    document.querySelectorAll('#issue-list .flex-item a.issue-title').forEach(function (a) {
      var t = target(a.getAttribute('href') || '');
      if (t) out.push({ anchor: a, repo: t.repo, issue: t.issue, first: document.getElementById('issue-list') });
    });
    var info = document.getElementById('issue-page-info');
    var h1 = document.querySelector('#issue-title-display h1');
    if (info && h1 && info.dataset.issueIndex) {
      var t = target((info.dataset.issueRepoLink || '') + '/issues/' + info.dataset.issueIndex);
      if (t) out.push({ anchor: h1.lastElementChild || h1, repo: t.repo, issue: t.issue, first: h1 });
    }
    return out;
  }

  var pending = false;
  function apply() {
    pending = false;
    if (document.hidden) return;
    var ps = places();
    var by = {};
    ps.forEach(function (p) { (by[p.repo] = by[p.repo] || []).push(p); });
    Object.keys(by).forEach(function (repo) {
      var s = st(repo), stale = !s.live && Date.now() - s.at >= REFRESH_MS;
      var need = by[repo].map(function (p) { return p.issue; }).filter(function (n, i, a) {
        return a.indexOf(n) === i && (stale || !s.err && !s.seen[n]);
      }).sort(function (a, b) { return a - b; });
      (need.length ? load(repo, need) : Promise.resolve(s.err ? { status: s.err } : { ok: true })).then(function (res) {
        if (res.again) return schedule();
        if (res.ok) {
          by[repo].forEach(function (p) { if (p.anchor.isConnected) draw(p.anchor, s.by[p.issue]); });
          listen(repo);
        } else if (res.status === 404) {
          // The repository is on this page, so a 404 means the viewer may
          // read it in Gitea but the sidecar does not know who they are.
          signedIn().then(function (sess) {
            if (!sess.login && sess.sign_in_url) signInLink(by[repo][0].first, repo, sess.sign_in_url);
          });
        }
      });
    });
  }

  function schedule() {
    if (pending) return;
    pending = true;
    setTimeout(apply, 50);
  }

  // Gitea swaps parts of the page (htmx, its own fetch actions): re-apply
  // whenever the DOM changes, and every half minute to keep times current.
  // A hidden page holds no stream and asks nothing.
  new MutationObserver(schedule).observe(document.documentElement, { childList: true, subtree: true });
  setInterval(schedule, REFRESH_MS);
  document.addEventListener('visibilitychange', function () { if (document.hidden) quiet(); else schedule(); });
  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', schedule);
  else schedule();
})();
