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
 *
 * A second plugin (gpuStart, below) shows the GPU in the status bar and a side panel,
 * fed by one event stream (<base>/gpusessions/gpu/events); see docs/jupyterlab.md.
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
      if (document.hidden) {
        // A background tab does not ask: through the proxy each answer would count as the
        // user being active (the GPU panel below uses one open event stream instead).
        timer = setTimeout(poll, 5000);
        return;
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

  // ---------------------------------------------------------------------------------
  // The GPU item (a status bar item and a side panel), separate from the notices above.
  // JupyterLab hands `init` its module-federation share scope; the item takes its own
  // copies of @lumino/widgets, @jupyterlab/statusbar and @jupyterlab/apputils from it
  // (JupyterLab shares each as a singleton), so it needs no build step either.
  // ---------------------------------------------------------------------------------
  var GPU_PANEL = 'gpusessions-gpu-panel';
  var GPU_ITEM = NAME + ':gpu';
  var shared = { widgets: null, statusbar: null, apputils: null };

  function fromScope(scope, name) {
    var versions = scope && scope[name];
    var keys = versions ? Object.keys(versions) : [];
    if (!keys.length) {
      return Promise.resolve(null);
    }
    var entry = versions[keys[keys.length - 1]];
    return Promise.resolve()
      .then(function () { return entry.get(); })
      .then(function (f) { return typeof f === 'function' ? f() : f; })
      .catch(function () { return null; });
  }

  function gpuInit(scope) {
    return Promise.all([
      fromScope(scope, '@lumino/widgets'),
      fromScope(scope, '@jupyterlab/statusbar'),
      fromScope(scope, '@jupyterlab/apputils')
    ]).then(function (mods) {
      shared.widgets = mods[0];
      shared.statusbar = mods[1];
      shared.apputils = mods[2];
    });
  }

  function gib(bytes) {
    return bytes === null || bytes === undefined ? '?' : (bytes / Math.pow(2, 30)).toFixed(1);
  }

  function clock(ts) {
    return new Date(ts * 1000).toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' });
  }

  // "MIG 1g.10gb · 2.1 / 9.8 GiB · kept"
  function gpuLine(d) {
    var s = d.summary || {};
    var st = d.state || {};
    var parts = [(d.session && d.session.gpu) || 'GPU'];
    parts.push(s.memory_total ? gib(s.memory_used) + ' / ' + gib(s.memory_total) + ' GiB' : 'memory ?');
    parts.push(st.keep_on_stop ? 'kept' : 'not kept');
    if (st.warning) {
      parts.push('idle: release ' + (st.warning.cull_at ? 'at ' + clock(st.warning.cull_at) : 'soon'));
    }
    return parts.join(' \u00b7 ');
  }

  function el(tag, attrs, children) {
    var node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    (children || []).forEach(function (c) {
      node.appendChild(typeof c === 'string' ? document.createTextNode(c) : c);
    });
    return node;
  }

  function row(label, value, key) {
    return el('tr', { 'data-gpu-field': key }, [el('th', {}, [label]), el('td', {}, [value])]);
  }

  function utilization(d) {
    var devs = d.devices || [];
    if (!devs.length) {
      return '?';
    }
    return devs.map(function (x) {
      if (x.activity === null || x.activity === undefined) {
        return 'not reported for this device (NVML cannot tell)';
      }
      return Math.round(x.activity) + '%' + (x.activity_source === 'gpm-sm-activity' ? ' (SM activity)' : '');
    }).join(', ');
  }

  function renderPanel(node, d, actions) {
    var st = d.state || {};
    var s = d.summary || {};
    var sess = d.session || {};
    var kept = st.kept_until ? 'yes, and held off the culler until ' + clock(st.kept_until) : '';
    var body = [
      el('h2', {}, ['Your GPU']),
      el('table', { class: 'gpusessions-gpu-table' }, [
        row('Device', (sess.gpu || '?') + (sess.devices.length ? ' (' + sess.devices.join(', ') + ')' : ''), 'device'),
        row('Node', sess.node || '?', 'node'),
        row('GPU memory', s.memory_total ? gib(s.memory_used) + ' / ' + gib(s.memory_total) + ' GiB in use' : '?', 'memory'),
        row('Utilization', utilization(d), 'utilization'),
        row('Kept across restarts', st.keep_on_stop ? 'yes: stopping the server keeps this GPU for you' : 'no: stopping the server releases it', 'kept'),
        row('Claim', st.claim || sess.claim || '?', 'claim')
      ])
    ];
    if (kept) {
      body.push(el('p', { 'data-gpu-field': 'kept-until' }, ['Kept: ' + kept + '.']));
    }
    if (d.agent_error) {
      body.push(el('p', { class: 'gpusessions-gpu-error' }, [d.agent_error]));
    }
    if (st.error) {
      body.push(el('p', { class: 'gpusessions-gpu-error' }, ['The hub: ' + st.error]));
    }
    body.push(el('h3', {}, ['Kernels']));
    var ks = d.kernels;
    if (ks === null || ks === undefined) {
      body.push(el('p', {}, [d.kernels_error || 'Kernels run in the notebook: their GPU memory is in the total above.']));
    } else if (!ks.length) {
      body.push(el('p', {}, ['No kernel is running.']));
    } else {
      body.push(el('table', { class: 'gpusessions-gpu-kernels' }, ks.map(function (k) {
        return el('tr', { 'data-kernel': k.id }, [
          el('td', {}, [k.path || k.name || k.id]),
          el('td', {}, [k.execution_state || '']),
          el('td', {}, [k.gpu_memory === null || k.gpu_memory === undefined ? '? GiB' : gib(k.gpu_memory) + ' GiB'])
        ]);
      })));
    }
    body.push(el('h3', {}, ['Idle GPU release']));
    if (st.warning) {
      var w = st.warning;
      body.push(el('p', { class: 'gpusessions-gpu-warning' }, [
        'This GPU and its notebook look idle: it will be released ' +
        (w.cull_at ? 'at ' + clock(w.cull_at) : 'soon') + (w.reason ? ' (' + w.reason + ')' : '') + '.'
      ]));
    } else {
      body.push(el('p', {}, ['No warning: the GPU is not about to be released.']));
    }
    var keep = el('button', { class: 'jp-Button jp-mod-styled jp-mod-accept', type: 'button' }, ['Keep my GPU']);
    keep.onclick = actions.keep;
    var release = el('button', { class: 'jp-Button jp-mod-styled jp-mod-warn', type: 'button' }, ['Release my GPU']);
    release.onclick = actions.release;
    body.push(el('p', { class: 'gpusessions-gpu-buttons' }, [keep, ' ', release]));
    if (actions.message) {
      body.push(el('p', { class: 'gpusessions-gpu-message', role: 'status' }, [actions.message]));
    }
    node.replaceChildren.apply(node, body);
  }

  var GPU_CSS =
    '.gpusessions-gpu-panel{padding:8px 12px;overflow:auto;background:var(--jp-layout-color1);' +
    'color:var(--jp-ui-font-color1);font-size:var(--jp-ui-font-size1)}' +
    '.gpusessions-gpu-panel table{border-collapse:collapse;margin-bottom:8px}' +
    '.gpusessions-gpu-panel th{text-align:left;padding:2px 8px 2px 0;font-weight:600;vertical-align:top}' +
    '.gpusessions-gpu-panel td{padding:2px 8px 2px 0}' +
    '.gpusessions-gpu-error,.gpusessions-gpu-warning{color:var(--jp-warn-color0)}' +
    '.gpusessions-gpu-icon{background-repeat:no-repeat;background-position:center;background-size:16px;' +
    'background-image:url("data:image/svg+xml;utf8,<svg xmlns=\'http://www.w3.org/2000/svg\' viewBox=\'0 0 24 24\'>' +
    '<path fill=\'%23616161\' d=\'M4 6h16v12H4z M2 9h2v2H2z M2 13h2v2H2z M20 9h2v2h-2z M20 13h2v2h-2z\'/>' +
    '<path fill=\'white\' d=\'M7 9h10v6H7z\'/></svg>")}' +
    '.gpusessions-gpu-status{cursor:pointer;padding:0 6px}' +
    '.gpusessions-gpu-top{align-self:center;margin-left:auto;font-size:var(--jp-ui-font-size1)}';

  function gpuStart(app, statusBar) {
    var cfg = config();
    var base = cfg.baseUrl || '/';
    var hubHome = (cfg.hubHost || '') + (cfg.hubPrefix || '/hub/') + 'home';
    var Widget = shared.widgets && shared.widgets.Widget;
    if (!Widget) {
      return; // cannot make widgets in this application
    }
    var last = null;
    var message = '';
    var item = null;
    var panel = null;
    var source = null;

    function render() {
      if (!last) {
        return;
      }
      if (item) {
        item.node.textContent = gpuLine(last);
        item.node.title = 'Your GPU: click for details';
      }
      renderPanel(panel.node, last, { keep: keepGPU, release: releaseGPU, message: message });
    }

    function say(text, type) {
      message = text;
      render();
      app.commands.execute('apputils:notify', {
        message: text, type: type, options: { autoClose: type === 'error' ? false : 8000 }
      });
    }

    function keepGPU() {
      return request(base, 'keep', 'POST').then(function (r) {
        if (r.ok) {
          var until = r.body.kept_until ? ' until ' + clock(r.body.kept_until) : '';
          say('Your GPU is kept' + until + '.', 'success');
        } else {
          say('Could not keep your GPU: ' + (r.body.message || 'error ' + r.status), 'error');
        }
      });
    }

    function confirmRelease() {
      var a = shared.apputils;
      var text = 'Release your GPU? This server stops, its kernels end, and the GPU goes back ' +
        'to the pool: the next start may get another one.';
      if (!a || !a.showDialog) {
        return Promise.resolve(window.confirm(text));
      }
      return a.showDialog({
        title: 'Release my GPU',
        body: text,
        buttons: [a.Dialog.cancelButton(), a.Dialog.warnButton({ label: 'Release' })]
      }).then(function (res) { return res.button.accept; });
    }

    function releaseGPU() {
      return confirmRelease().then(function (yes) {
        if (!yes) {
          return;
        }
        message = 'Releasing your GPU ...';
        render();
        return request(base, 'gpu/release', 'POST').then(function (r) { return r; }, function () {
          return { ok: true, status: 0, body: {} }; // the server stopped under the request
        }).then(function (r) {
          if (r.ok || r.status >= 500) {
            if (source) {
              source.close();
            }
            say('Your GPU is released; this server stops. Going back to the hub ...', 'info');
            setTimeout(function () { window.location.href = hubHome; }, 3000);
          } else {
            say('Could not release your GPU: ' + (r.body.message || 'error ' + r.status), 'error');
          }
        });
      });
    }

    function show(d) {
      last = d;
      if (!panel) {
        var style = document.createElement('style');
        style.textContent = GPU_CSS;
        document.head.appendChild(style);
        panel = new Widget();
        panel.id = GPU_PANEL;
        panel.addClass('gpusessions-gpu-panel');
        panel.title.caption = 'My GPU';
        panel.title.iconClass = 'gpusessions-gpu-icon';
        app.shell.add(panel, 'left', { rank: 1000 });
        item = new Widget();
        item.addClass('gpusessions-gpu-status');
        item.node.onclick = function () { app.shell.activateById(GPU_PANEL); };
        if (statusBar) {
          statusBar.registerStatusItem(GPU_ITEM, { item: item, align: 'left', rank: 1000 });
        } else {
          // Notebook 7 has no status bar: the item goes to the top bar, by the title.
          item.addClass('gpusessions-gpu-top');
          app.shell.add(item, 'top', { rank: 900 });
        }
      }
      render();
    }

    // An EventSource sends no headers: the xsrf token goes as an argument (JupyterHub checks
    // it on cookie-authenticated requests that are not page loads).
    source = new EventSource(base + 'gpusessions/gpu/events?_xsrf=' + encodeURIComponent(xsrf()));
    source.onmessage = function (e) {
      var d;
      try {
        d = JSON.parse(e.data);
      } catch (err) {
        return;
      }
      if (!d.enabled) {
        source.close(); // not a gpusessions GPU server: no item
        return;
      }
      show(d);
    };
  }

  var gpuPlugin = {
    id: NAME + ':gpu',
    description: 'Shows your GPU in the status bar and a side panel; Keep and Release it.',
    autoStart: true,
    requires: [],
    optional: [],
    activate: function (app) {
      var sb = arguments.length > 1 ? arguments[1] : null;
      gpuStart(app, sb);
    }
  };

  var plugin = {
    id: NAME + ':plugin',
    description: 'Warns inside JupyterLab before gpusessions releases an idle GPU.',
    autoStart: true,
    activate: start
  };

  window._JUPYTERLAB = window._JUPYTERLAB || {};
  window._JUPYTERLAB[NAME] = {
    init: function (scope) { return gpuInit(scope); },
    get: function (module) {
      if (module === './extension') {
        if (shared.statusbar && shared.statusbar.IStatusBar) {
          gpuPlugin.optional = [shared.statusbar.IStatusBar];
        }
        var plugins = [plugin, gpuPlugin];
        return Promise.resolve(function () { return { __esModule: true, default: plugins }; });
      }
      return Promise.reject(new Error(NAME + ' has no module ' + module));
    }
  };
})();
