/* collab-lease: the buttons of an issue page's sidebar, for a viewer Gitea
 * lets write the issue: Claim, Release, and for admins Force release.
 * collab-lease.js loads it for such a viewer only, pinned by its
 * integrity, and calls it with the issue's claim on every change. The
 * buttons write with the sidecar's session cookie; the sidecar itself
 * checks the viewer's rights and that the request comes from Gitea's page.
 * ES2017, no build. */
(function () {
  'use strict';
  var me = document.currentScript;
  if (!me || !me.hook) return;
  var base = me.src.replace(/\/assets\/[^/]*$/, '');
  // The durations a claim may be made for, the first the default: none,
  // as an assignment has.
  var TTLS = [['', 'no expiry'], ['30m', '30 minutes'], ['2h', '2 hours'], ['24h', '1 day']];
  var session;

  function api(path, post) {
    return fetch(base + '/api/v1' + path, { method: post ? 'POST' : 'GET', credentials: 'include', headers: { Accept: 'application/json' } });
  }

  function el(tag, cls, words) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (words) e.textContent = words;
    return e;
  }

  function who(l) { return l.agent ? l.holder + ' \u00b7 ' + l.agent : l.holder; }

  function when(t) { return new Date(t).toLocaleString([], { dateStyle: 'short', timeStyle: 'short' }); }

  // state is what the buttons offer for claim l (undefined: none): claim
  // (nobody holds it), release (the viewer's account does: the viewer or
  // one of its agents), sign in (the sidecar does not know the viewer), or
  // nothing (someone else holds it).
  function state(l, sess) {
    if (!sess.login) return sess.sign_in_url ? 'signin' : '';
    if (!l || l.expires_at !== null && Date.parse(l.expires_at) <= Date.now()) return 'claim';
    return l.holder === sess.login ? 'release' : '';
  }

  // why is the one line that says why the sidecar refused: the reply j of
  // status code.
  function why(code, j) {
    switch (j.status) {
      case 'held':
      case 'not_holder':
        return j.holder ? 'Claimed by ' + who(j) + (j.expires_at ? ' until ' + when(j.expires_at) : '') : 'Nobody holds it';
      case 'cooling':
        return 'Its last claim lapsed: it may be claimed again after ' + when(j.until);
      case 'limit':
        return 'At the limit of ' + j.limit + ' live claims' + (j.scope === 'account' ? ' for the account' : '');
    }
    if (code === 401) return 'Sign in to the sidecar again';
    var e = j.error || j.status && j.status.replace(/_/g, ' ') || 'refused (' + code + ')';
    return e.charAt(0).toUpperCase() + e.slice(1);
  }

  // say shows msg ('' for none) in the line under the buttons.
  function say(box, msg) {
    var line = box.querySelector('.collab-lease-error');
    if (!msg) return line && line.remove();
    if (!line) {
      line = el('div', 'collab-lease-error');
      line.setAttribute('role', 'alert');
      var div = box.querySelector('.collab-lease-claim');
      box.insertBefore(line, div ? div.nextSibling : box.firstChild);
    }
    line.textContent = msg;
  }

  // act sends the button's write for issue p and says how it went; again
  // reads the claim anew (the events tell it too, when they flow). The
  // button is busy meanwhile, not disabled: that would take the focus away
  // from it, and from the button that takes its place.
  function act(box, btn, p, verb, again) {
    if (btn.busy) return;
    btn.busy = 1;
    btn.classList.add('loading');
    say(box, '');
    api('/repos/' + p.repo + '/issues/' + p.issue + '/lease/' + verb, 1).then(function (r) {
      return r.ok ? '' : r.json().catch(function () { return {}; }).then(function (j) { return why(r.status, j); });
    }, function () { return 'The sidecar did not answer: try again'; }).then(function (msg) {
      btn.busy = 0;
      btn.classList.remove('loading');
      say(box, msg);
      again();
    });
  }

  // draw keeps the buttons of box as claim l wants them, touching the DOM
  // only on a change (so our own edits do not re-trigger the page's
  // observer). A refusal's line stays until the buttons change to Claim
  // or Release again.
  function draw(box, l, p, again, sess) {
    var want = state(l, sess), key = want + (want === 'release' ? who(l) : '');
    var div = box.querySelector('.collab-lease-claim');
    if (div && div.k === key) return;
    var focused = div && div.contains(document.activeElement);
    if (!div) div = box.insertBefore(el('div', 'collab-lease-claim'), box.firstChild);
    div.textContent = '';
    div.k = key;
    if (want === 'claim' || want === 'release') say(box, '');
    var btn;
    if (want === 'claim') {
      var label = div.appendChild(el('label', 'collab-lease-ttl', 'Claim for ')), select = label.appendChild(el('select'));
      TTLS.forEach(function (t) { select.appendChild(el('option', '', t[1])).value = t[0]; });
      btn = div.appendChild(el('button', 'ui tiny primary button collab-lease-claim-button', 'Claim'));
      btn.type = 'button';
      btn.onclick = function () {
        act(box, btn, p, 'claim' + (select.value ? '?ttl=' + select.value : ''), again);
      };
    } else if (want === 'release') {
      btn = div.appendChild(el('button', 'ui tiny basic button collab-lease-release', 'Release'));
      btn.type = 'button';
      btn.title = 'Release the claim of ' + who(l);
      btn.onclick = function () {
        // An agent's claim is someone's work in progress: ask first.
        if (!l.agent || confirm('Release #' + p.issue + ', claimed by ' + who(l) + '?')) act(box, btn, p, 'release', again);
      };
    } else if (want === 'signin') {
      div.appendChild(el('a', '', 'Sign in to claim')).href = sess.sign_in_url + '?return_to=' + encodeURIComponent(location.href);
    }
    if (focused && btn) btn.focus();
  }

  // force keeps the Force release button at the end of box while the
  // issue is claimed, for whom Gitea shows the repository's settings (its
  // admins); it asks first, naming the holder of the moment.
  function force(box, l, p, again) {
    var btn = box.querySelector('.collab-lease-force');
    if (!l || !document.querySelector('a[href="' + p.link + '/settings"]')) return btn && btn.remove();
    if (!btn) btn = box.appendChild(el('button', 'ui tiny basic red button collab-lease-force', 'Force release'));
    btn.type = 'button';
    btn.onclick = function () {
      if (confirm('Force-release #' + p.issue + ', claimed by ' + who(l) + '?')) act(box, btn, p, 'force-release', again);
    };
  }

  me.hook(function (box, l, p, again) {
    session = session || api('/session').then(function (r) { return r.ok ? r.json() : {}; }).catch(function () { return {}; });
    session.then(function (sess) {
      draw(box, l, p, again, sess);
      if (sess.login) force(box, l, p, again);
    });
  });
})();
