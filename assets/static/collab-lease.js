/* collab-lease: claim badges on Gitea's issue lists and pages, kept current
 * by the sidecar's lease events while the page is visible (else polled);
 * on an issue page, the paths its claim reserves, the claim history and,
 * for writers, the buttons (collab-lease-claim.js, loaded for them only).
 * Silent where nothing is claimed or the sidecar is down. ES2017, no build. */
(function () {
  'use strict';
  var me = document.currentScript;
  if (!me || !window.fetch || !window.MutationObserver) return;
  // The sidecar: where this script came from.
  var base = (me.getAttribute('data-collab-lease-url') || me.src.replace(/\/assets\/[^/]*$/, '')).replace(/\/$/, '');
  var REFRESH = 30000;
  var repos = {}; // "owner/repo" -> its leases as we know them, and its event stream
  var session, pending, claim = 0;
  // The buttons' script as the sidecar serves it: Load puts its
  // content-addressed name and its integrity here, so the footer's pin on
  // this script covers that one too.
  var CLAIM = ['collab-lease-claim.js', ''];

  function get(path, post) {
    return fetch(base + '/api/v1' + path, { method: post ? 'POST' : 'GET', credentials: 'include', headers: { Accept: 'application/json' } });
  }

  function st(repo) {
    return repos[repo] || (repos[repo] = { by: {}, seen: {}, at: 0, v: 0 });
  }

  // load asks for these numbers' leases, 50 a request (304 if unchanged),
  // and resolves to 0 or the failure (kept as long as an answer). An answer
  // an event may have overtaken is not kept.
  function load(repo, nums) {
    var s = st(repo), v = s.v, asks = [];
    for (var i = 0; i < nums.length; i += 50) {
      asks.push(get('/repos/' + repo + '/leases?issue=' + nums.slice(i, i + 50).join('&issue=')).then(function (r) {
        return r.ok ? r.json() : r.status;
      }));
    }
    return Promise.all(asks).catch(function () { return [-1]; }).then(function (parts) {
      s.at = Date.now();
      s.err = 0;
      parts.forEach(function (p) { if (!p.leases) s.err = p; });
      if (!s.err && s.v === v) {
        nums.forEach(function (n) { delete s.by[n]; s.seen[n] = 1; });
        parts.forEach(function (p) { p.leases.forEach(function (l) { s.by[l.issue] = l; }); });
      } else schedule();
      return s.err;
    });
  }

  // listen follows repo's lease events; a refused stream is retried ever
  // more slowly.
  function listen(repo) {
    var s = st(repo);
    if (s.es || s.timer || document.hidden || !window.EventSource) return;
    var es = s.es = new EventSource(base + '/api/v1/repos/' + repo + '/leases/events', { withCredentials: true });
    es.onopen = function () { s.live = 1; s.wait = 0; s.seen = {}; s.res = 0; schedule(); };
    es.onerror = function () {
      s.live = 0;
      if (es.readyState < 2) return; // the browser reconnects by itself
      es.close();
      s.es = 0;
      s.wait = Math.min(2 * (s.wait || 1000), 60000);
      s.timer = setTimeout(function () { s.timer = 0; listen(repo); }, s.wait);
    };
    ['lease', 'released', 'reset', 'reserved', 'unreserved'].forEach(function (type) {
      es.addEventListener(type, function (e) {
        var d = JSON.parse(e.data);
        if (d.glob) {
          // A holder has one reservation of a glob: this one replaces it.
          s.rv = (s.rv || 0) + 1;
          if (s.res) s.res = s.res.filter(function (x) { return held(x) !== held(d); }).concat(type === 'reserved' ? [d] : []);
        } else {
          s.v++;
          if (type === 'lease') s.by[d.issue] = d;
          else if (d.issue) delete s.by[d.issue];
          else s.seen = {}, s.res = 0;
        }
        schedule();
      });
    });
  }

  function quiet() {
    Object.keys(repos).forEach(function (r) {
      var s = repos[r];
      if (s.es) s.es.close();
      clearTimeout(s.timer);
      s.es = s.timer = s.live = s.res = 0;
      s.seen = {}; // events will be missed: ask again when shown
    });
  }

  function signedIn() {
    return session || (session = get('/session').then(function (r) { return r.ok ? r.json() : {}; }).catch(function () { return {}; }));
  }

  // target parses ".../owner/repo/(issues|pulls)/N".
  function target(href) {
    var m = /\/([^/]+)\/([^/]+)\/(?:issues|pulls)\/(\d+)\/?$/.exec(new URL(href, location.href).pathname);
    return m ? { repo: decodeURIComponent(m[1]) + '/' + decodeURIComponent(m[2]), issue: Number(m[3]) } : null;
  }

  function remaining(ms) {
    var m = Math.floor(ms / 60000), h = Math.floor(m / 60);
    return m < 1 ? '<1m left' : m < 60 ? m + 'm left' : h < 48 ? h + 'h ' + (m % 60) + 'm left' : Math.floor(h / 24) + 'd left';
  }

  // who is l's holder as a badge names it: "bot · agent-7" for an agent.
  function who(l) { return l.agent ? l.holder + ' \u00b7 ' + l.agent : l.holder; }

  // held names reservation x as the events do: its holder and its glob.
  function held(x) { return who(x) + '\n' + x.glob; }

  // reserved reads repo's path reservations unless they are asked for, or
  // known and kept current by the events (else read every half minute);
  // an answer an event may have overtaken is asked again.
  function reserved(repo, s) {
    if (s.rq || s.res && (s.live || Date.now() - s.rat < REFRESH)) return;
    var v = s.rv;
    s.rq = get('/repos/' + repo + '/reservations').then(function (r) { return r.ok && r.json(); }).catch(function () {}).then(function (j) {
      s.rq = 0;
      s.rat = Date.now();
      if (s.rv === v) s.res = (j && j.reservations) || [];
      schedule();
    });
  }

  // text is the badge's words for lease l now, or null once it has expired.
  function text(l) {
    if (l.expires_at === null) return 'assigned to ' + who(l);
    var left = Date.parse(l.expires_at) - Date.now();
    return left > 0 ? 'claimed by ' + who(l) + ' \u00b7 ' + remaining(left) : null;
  }

  function el(tag, cls, words) {
    var e = document.createElement(tag);
    e.className = cls;
    e.textContent = words || '';
    return e;
  }

  function when(t) { return new Date(t).toLocaleString([], { dateStyle: 'short', timeStyle: 'short' }); }

  // draw puts lease l's badge (or none) after anchor, touching the DOM only
  // on a change, so our own edits do not re-trigger us.
  function draw(anchor, l) {
    var next = anchor.nextElementSibling;
    var have = next && next.classList.contains('collab-lease-badge') ? next : null;
    var words = l && text(l);
    if (!words) return have && have.remove();
    if (have && have.textContent === words) return;
    if (!have) {
      have = el('span', 'collab-lease-badge' + (l.expires_at === null ? ' collab-lease-open' : ''));
      anchor.insertAdjacentElement('afterend', have);
    }
    have.textContent = words;
    have.title = 'collab-lease: token ' + l.token + (l.expires_at ? ', until ' + when(l.expires_at) : ', open-ended');
    have.dataset.collabLeaseIssue = l.issue;
  }

  function signInLink(where, url) {
    if (document.querySelector('.collab-lease-signin')) return;
    var div = el('div', 'collab-lease-signin'), a = div.appendChild(el('a', '', 'sign in to see claims'));
    a.href = url + '?return_to=' + encodeURIComponent(location.href);
    where.insertAdjacentElement('beforebegin', div);
  }

  // panel keeps the issue page's sidebar section: while the issue is
  // claimed, the paths the claim reserves (kept current by the events);
  // the claim history, read when opened and after each change; and for
  // whom Gitea lets set the due date (writers), the buttons' script, which
  // draws Claim, Release and Force release on every change.
  function panel(p, s) {
    var side = document.querySelector('.issue-content-right'), box = side && side.querySelector('.collab-lease-panel');
    if (!side) return;
    if (!box) {
      side.appendChild(el('div', 'divider'));
      box = side.appendChild(el('div', 'collab-lease-panel'));
      box.appendChild(el('details', 'collab-lease-history')).appendChild(el('summary', '', 'Claim history'));
      box.firstChild.ontoggle = schedule;
    }
    var d = box.querySelector('details'), l = s.by[p.issue];
    if (l) reserved(p.repo, s);
    paths(box, d, l && s, p.issue);
    if (d.open && box.v !== s.v) {
      box.v = s.v;
      get('/repos/' + p.repo + '/issues/' + p.issue + '/lease/history').then(function (r) { return r.ok && r.json(); }).then(function (h) {
        var t = el('table', 'ui very basic compact table'), old = d.querySelector('table');
        [['Token', 'Holder', 'From', 'To', 'Ended']].concat((h.tenures || []).map(function (x) {
          return ['#' + x.token, who(x), when(x.acquired_at), x.ended_at ? when(x.ended_at) : '',
            x.ended_by ? x.ended_by.replace('_', ' ') + (x.forced_by ? ' by ' + x.forced_by : '') : 'holds it'];
        })).forEach(function (cells, i) {
          var tr = t.insertRow();
          cells.forEach(function (c) { tr.appendChild(el(i ? 'td' : 'th', '', c)); });
        });
        if (old) old.remove();
        d.appendChild(t);
      }).catch(function () {});
    }
    if (claim.call) claim(box, l, p, function () { s.seen = {}; schedule(); });
    else if (!claim && document.querySelector('.issue-due-form')) {
      claim = document.createElement('script');
      claim.src = base + '/assets/' + CLAIM[0];
      claim.integrity = CLAIM[1];
      claim.crossOrigin = 'anonymous';
      claim.hook = function (f) { claim = f; schedule(); };
      document.head.appendChild(claim);
    }
  }

  // paths lists the reservations of the claim on issue (none without s)
  // before d, rebuilding the list only when it changed.
  function paths(box, d, s, issue) {
    var ul = box.querySelector('.collab-lease-paths'), mine = s && s.res ? s.res.filter(function (x) { return x.issue === issue; }) : [];
    var key = mine.map(function (x) { return x.glob + (x.shared ? ' shared' : ''); }).join('\n');
    if (ul && ul.k === key) return;
    if (ul) ul.remove();
    if (!key) return;
    ul = box.insertBefore(el('ul', 'collab-lease-paths'), d);
    ul.k = key;
    ul.title = 'Paths reserved with this claim';
    mine.forEach(function (x) {
      var li = ul.appendChild(el('li'));
      li.appendChild(el('code', '', x.glob));
      if (x.shared) li.appendChild(el('span', 'collab-lease-shared', 'shared'));
    });
  }

  // Where badges go: anchor element, repo, issue number.
  function places() {
    var out = [], list = document.getElementById('issue-list');
    document.querySelectorAll('#issue-list .flex-item a.issue-title').forEach(function (a) {
      var t = target(a.getAttribute('href') || '');
      if (t) out.push({ anchor: a, repo: t.repo, issue: t.issue, first: list });
    });
    var info = document.getElementById('issue-page-info'), h1 = document.querySelector('#issue-title-display h1');
    var t = info && h1 && info.dataset.issueIndex && target(info.dataset.issueRepoLink + '/issues/' + info.dataset.issueIndex);
    if (t) out.push({ anchor: h1.querySelector('.index') || h1, repo: t.repo, issue: t.issue, first: h1, link: info.dataset.issueRepoLink });
    return out;
  }

  function header(m, t) {
    if (m && t && !m.claims) m.claims = m.appendChild(el('a', 'item', 'Claims')).href = base + '/' + target(t.href + '/issues/1').repo + '/claims?theme=' + document.documentElement.dataset.theme;
  }

  function apply() {
    pending = 0;
    if (document.hidden) return;
    header(document.querySelector('.overflow-menu-items'), document.querySelector('.repo-header .flex-item-title a:last-child'));
    var by = {};
    places().forEach(function (p) { (by[p.repo] = by[p.repo] || []).push(p); });
    Object.keys(by).forEach(function (repo) {
      var s = st(repo), stale = !s.live && Date.now() - s.at >= REFRESH;
      var need = by[repo].map(function (p) { return p.issue; }).filter(function (n, i, a) {
        return a.indexOf(n) === i && (stale || !s.err && !s.seen[n]);
      });
      (need.length ? load(repo, need) : Promise.resolve(s.err)).then(function (err) {
        if (!err) {
          by[repo].forEach(function (p) {
            if (p.anchor.isConnected) draw(p.anchor, s.by[p.issue]);
            if (p.link) panel(p, s);
          });
          listen(repo);
        } else if (err === 404) {
          // Gitea shows the repository: the sidecar does not know the viewer.
          signedIn().then(function (sess) {
            if (!sess.login && sess.sign_in_url) signInLink(by[repo][0].first, sess.sign_in_url);
          });
        }
      });
    });
  }

  function schedule() {
    if (!pending) pending = setTimeout(apply, 50);
  }

  // Gitea swaps parts of the page: apply on DOM changes, and every half
  // minute for the times. A hidden page holds no stream and asks nothing.
  new MutationObserver(schedule).observe(document.documentElement, { childList: true, subtree: true });
  setInterval(schedule, REFRESH);
  document.addEventListener('visibilitychange', function () { if (document.hidden) quiet(); else schedule(); });
  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', schedule);
  else schedule();
})();
