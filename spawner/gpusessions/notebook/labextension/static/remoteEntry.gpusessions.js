/*
 * gpusessions notices: a JupyterLab 4 / Notebook 7 federated extension written by hand
 * (no build step). It shares no modules: it talks to JupyterLab only through the
 * application's command registry ("apputils:notify", "apputils:dismiss-notification").
 *
 * Every `poll_seconds` it asks <base>/gpusessions/warnings (the notebook server relays
 * the hub's answer) and, while the culler warns about this server's GPU, shows a
 * warning that stays until dismissed, with a "Keep my GPU" button.
 *
 * When this server is gone (KAI Scheduler took the GPU back and stopped it), the tab cannot
 * ask its own server any more: `hubNotices` then asks the hub for this server's notices
 * (the reason it stopped) and shows them.
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
      headers: { 'X-XSRFToken': xsrf(), 'Content-Type': 'application/json', 'Accept': 'application/json' },
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

  // The server of this tab is gone: read its notices from the hub itself (the hub's page route
  // gpusessions/notices, with the hub's login cookie), every 10 s for 10 minutes, then every
  // minute, and show each new one. Started once; `seen` is shared with the server's own poll.
  function hubNotices(cfg, seen, show) {
    if (!cfg.hubPrefix) {
      return; // not under JupyterHub
    }
    var url = cfg.hubPrefix + 'gpusessions/notices?server=' + encodeURIComponent(cfg.hubServerName || '');
    var began = Date.now();
    var none = false; // the hub has no such route: not a gpusessions hub, stop asking
    function look() {
      fetch(url, { credentials: 'same-origin', headers: { 'Accept': 'application/json' } })
        .then(function (r) {
          none = r.status === 404;
          return r.ok ? r.json() : {};
        })
        .then(function (body) {
          (body.notices || []).forEach(function (n) {
            if (!seen[n.at]) {
              seen[n.at] = true;
              show(n);
            }
          });
        }, function () { /* the hub is away too: look again later */ })
        .then(function () {
          if (!none) {
            setTimeout(look, Date.now() - began < 600000 ? 10000 : 60000);
          }
        });
    }
    look();
  }

  function start(app) {
    var base = config().baseUrl || '/';
    var shown = null; // {key, id}
    var timer = null;
    var lostSeen = {};
    var noticeSeen = {};
    var serverGone = false;

    // JupyterLab cuts a notification at 140 characters: a longer notice links to the hub home
    // page, which shows it whole (JupyterLab's own command under JupyterHub).
    function showNotice(n) {
      var more = n.text.length > 140 && app.commands.hasCommand('hub:control-panel') ?
        [{ label: 'Read it on the hub', commandId: 'hub:control-panel', displayType: 'link' }] : [];
      notify(n.level === 'info' ? 'info' : 'warning', n.text, more);
    }

    function gone() {
      if (!serverGone) {
        serverGone = true;
        hubNotices(config(), noticeSeen, showNotice);
      }
    }

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
        if (body.enabled === false) {
          return; // not under gpusessions: stop polling
        }
        if (!r.ok || typeof body.enabled !== 'boolean') {
          gone(); // this server does not answer any more (stopped): ask the hub why
          return;
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
          showNotice(n);
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
        gone();
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
