/*
 * gpusessions notices: a JupyterLab 4 / Notebook 7 federated extension written by hand
 * (no build step). It shares no modules: it talks to JupyterLab only through the
 * application's command registry ("apputils:notify", "apputils:dismiss-notification").
 *
 * Every `poll_seconds` it asks <base>/gpusessions/warnings (the notebook server relays
 * the hub's answer) and, while the culler warns about this server's GPU, shows a
 * warning that stays until dismissed, with a "Keep my GPU" button.
 */
(function () {
  'use strict';
  var NAME = '@gpusessions/notices';
  var KEEP = 'gpusessions:keep';

  function config() {
    var el = document.getElementById('jupyter-config-data');
    try {
      return el ? JSON.parse(el.textContent || '{}') : {};
    } catch (e) {
      return {};
    }
  }

  function xsrf() {
    var m = document.cookie.match('\\b_xsrf=([^;]*)\\b');
    return m ? decodeURIComponent(m[1]) : '';
  }

  function request(base, path, method) {
    return fetch(base + 'gpusessions/' + path, {
      method: method,
      credentials: 'same-origin',
      headers: { 'X-XSRFToken': xsrf(), 'Content-Type': 'application/json' },
      body: method === 'POST' ? '{}' : undefined
    }).then(function (r) {
      return r.json().then(
        function (body) { return { ok: r.ok, status: r.status, body: body }; },
        function () { return { ok: r.ok, status: r.status, body: {} }; }
      );
    });
  }

  function when(ts) {
    if (!ts) {
      return 'soon';
    }
    var d = new Date(ts * 1000);
    var mins = Math.max(0, Math.round((ts * 1000 - Date.now()) / 60000));
    return 'at ' + d.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' }) +
      ' (in ' + mins + ' min)';
  }

  // JupyterLab cuts a notification at 140 characters: keep it short.
  function message(w) {
    var what = w.profile ? 'Idle GPU (' + w.profile + ')' : 'Idle GPU';
    var why = w.reason ? ': ' + w.reason : '';
    return what + ' will be released ' + when(w.cull_at) + why + '.';
  }

  function start(app) {
    var base = config().baseUrl || '/';
    var shown = null; // {key, id}
    var timer = null;
    var lostSeen = {};
    var noticeSeen = {};

    function notify(type, msg, actions) {
      return app.commands.execute('apputils:notify', {
        message: msg,
        type: type,
        options: { autoClose: type === 'success' ? 8000 : false, actions: actions || [] }
      });
    }

    function dismiss() {
      if (shown && shown.id) {
        app.commands.execute('apputils:dismiss-notification', { id: shown.id });
      }
      shown = null;
    }

    app.commands.addCommand(KEEP, {
      label: 'Keep my GPU',
      execute: function () {
        return request(base, 'keep', 'POST').then(function (r) {
          dismiss();
          if (r.ok) {
            var until = r.body.kept_until ? new Date(r.body.kept_until * 1000) : null;
            notify('success', 'Your GPU is kept' +
              (until ? ' until ' + until.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' }) : '') + '.');
          } else {
            notify('error', 'Could not keep your GPU: ' + (r.body.message || ('error ' + r.status)));
          }
          poll();
        });
      }
    });

    function poll() {
      if (timer) {
        clearTimeout(timer);
      }
      request(base, 'warnings', 'GET').then(function (r) {
        var body = r.body || {};
        if (!r.ok || body.enabled === false) {
          return; // not under gpusessions: stop polling
        }
        (body.lost_kernels || []).forEach(function (ev) {
          if (lostSeen[ev.at]) {
            return;
          }
          lostSeen[ev.at] = true;
          notify('error', (ev.count === 1 ? 'A kernel was' : ev.count + ' kernels were') +
            ' lost: ' + ev.reason + '. Restart it from the Kernel menu.', []);
        });
        (body.notices || []).forEach(function (n) {
          if (noticeSeen[n.at]) {
            return;
          }
          noticeSeen[n.at] = true;
          notify(n.level === 'info' ? 'info' : 'warning', n.text, []);
        });
        var w = (body.warnings || [])[0];
        if (!w) {
          dismiss();
        } else {
          var key = w.claim + '@' + w.cull_at;
          if (!shown || shown.key !== key) {
            dismiss();
            shown = { key: key, id: null };
            var mine = shown;
            Promise.resolve(notify('warning', message(w), [
              { label: 'Keep my GPU', commandId: KEEP, displayType: 'accent' }
            ])).then(function (id) { mine.id = id; });
          }
        }
        timer = setTimeout(poll, (body.poll_seconds || 30) * 1000);
      }, function () {
        timer = setTimeout(poll, 60000);
      });
    }

    app.restored.then(poll);
  }

  var plugin = {
    id: NAME + ':plugin',
    description: 'Warns inside JupyterLab before gpusessions releases an idle GPU.',
    autoStart: true,
    activate: start
  };

  window._JUPYTERLAB = window._JUPYTERLAB || {};
  window._JUPYTERLAB[NAME] = {
    init: function () { return Promise.resolve(); },
    get: function (module) {
      if (module === './extension') {
        return Promise.resolve(function () { return { __esModule: true, default: plugin }; });
      }
      return Promise.reject(new Error(NAME + ' has no module ' + module));
    }
  };
})();
