/* collab-lease: draws "claimed by alice · 12m left" badges into Gitea's
 * issue lists and issue pages. It reads the live leases of the numbers on
 * the page, once per repository, from the sidecar that served this script, and draws
 * nothing (and logs nothing) where nothing is claimed or the sidecar is
 * unreachable. Plain ES2017, no dependencies, no build step. */
(function () {
  'use strict';
  var me = document.currentScript;
  if (!me || !window.fetch || !window.MutationObserver) return;
  // The sidecar's base URL: where this script came from, minus /assets/….
  var base = (me.getAttribute('data-collab-lease-url') || me.src.replace(/\/assets\/[^/]*$/, '')).replace(/\/$/, '');
  var REFRESH_MS = 30000;
  var leases = {}; // "owner/repo" -> {at, promise}
  var session = null; // promise of {login, sign_in_url} from the sidecar

  function get(path) {
    return fetch(base + path, { credentials: 'include', headers: { Accept: 'application/json' } });
  }

  // leasesOf resolves to {ok, byIssue} or {ok: false, status}: the live
  // leases of these numbers of repo, asked for in one request per 50
  // numbers (?issue=…; a page of Gitea's issue list shows at most 50), so
  // the answer does not grow with the repository. Unchanged answers are
  // 304s: the sidecar sends an ETag and the browser revalidates.
  var MAX_ISSUES = 50;
  function leasesOf(repo, issues) {
    var nums = issues.filter(function (n, i) { return issues.indexOf(n) === i; }).sort(function (a, b) { return a - b; });
    var key = repo + '#' + nums.join(',');
    var c = leases[key];
    if (c && Date.now() - c.at < REFRESH_MS) return c.promise;
    var asks = [];
    for (var i = 0; i < nums.length; i += MAX_ISSUES) {
      var q = nums.slice(i, i + MAX_ISSUES).map(function (n) { return 'issue=' + n; }).join('&');
      asks.push(get('/api/v1/repos/' + repo + '/leases?' + q).then(function (r) {
        if (!r.ok) return { ok: false, status: r.status };
        return r.json().then(function (j) { return { ok: true, leases: j.leases || [] }; });
      }));
    }
    var p = Promise.all(asks).then(function (parts) {
      var byIssue = {};
      for (var k = 0; k < parts.length; k++) {
        if (!parts[k].ok) return parts[k];
        parts[k].leases.forEach(function (l) { byIssue[l.issue] = l; });
      }
      return { ok: true, byIssue: byIssue };
    }).catch(function () { return { ok: false, status: 0 }; });
    leases[key] = { at: Date.now(), promise: p };
    return p;
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
    var ps = places();
    var repos = {};
    ps.forEach(function (p) { (repos[p.repo] = repos[p.repo] || []).push(p); });
    Object.keys(repos).forEach(function (repo) {
      leasesOf(repo, repos[repo].map(function (p) { return p.issue; })).then(function (res) {
        if (res.ok) {
          repos[repo].forEach(function (p) { if (p.anchor.isConnected) draw(p.anchor, res.byIssue[p.issue]); });
        } else if (res.status === 404) {
          // The repository is on this page, so a 404 means the viewer may
          // read it in Gitea but the sidecar does not know who they are.
          signedIn().then(function (sess) {
            if (!sess.login && sess.sign_in_url) signInLink(repos[repo][0].first, repo, sess.sign_in_url);
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
  new MutationObserver(schedule).observe(document.documentElement, { childList: true, subtree: true });
  setInterval(schedule, REFRESH_MS);
  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', schedule);
  else schedule();
})();
