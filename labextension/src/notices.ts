/**
 * The culler's idle warning, the hub's notices and lost kernels, as notifications.
 *
 * Every `poll_seconds` (30 s) a visible tab asks <base>/gpusessions/warnings (the notebook
 * server relays the hub's answer). While the culler warns about this server's GPU a warning
 * stays on screen with a "Keep my GPU" button. When this server no longer answers (KAI
 * Scheduler took the GPU back and stopped it), the tab asks the hub for this server's
 * notices (why it stopped) and shows them.
 */
import { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { ServerConnection } from '@jupyterlab/services';

import { hubInfo, hubRequest, request } from './api';
import { idleMessage, lostKernelsMessage, NOTIFICATION_MAX, warningKey } from './format';
import { KEEP_COMMAND, keep } from './keep';
import { dismiss, notify } from './notify';
import { firstHealth, Seen } from './seen';
import { INotice, IWarnings } from './types';

const HUB_COMMAND = 'hub:control-panel';

/**
 * The server of this tab is gone: read its notices from the hub itself (the hub's page
 * route gpusessions/notices, with the hub's login cookie), every 10 s for 10 minutes, then
 * every minute, and show each new one.
 */
function watchHubNotices(seen: Seen, show: (n: INotice) => void): void {
  const hub = hubInfo();
  if (!hub) {
    return;
  }
  const began = Date.now();
  const look = async () => {
    try {
      const r = await hubRequest<{ notices?: INotice[] }>(hub, 'gpusessions/notices', {
        server: hub.serverName
      });
      if (r.status === 404) {
        return; // not a gpusessions hub: stop asking
      }
      for (const n of (r.ok && r.body.notices) || []) {
        if (seen.first(n.at)) {
          show(n);
        }
      }
    } catch {
      // the hub is away too: look again later
    }
    setTimeout(look, Date.now() - began < 600000 ? 10000 : 60000);
  };
  void look();
}

function activate(app: JupyterFrontEnd): void {
  const settings: ServerConnection.ISettings = app.serviceManager.serverSettings;
  const lost = new Seen();
  const noticed = new Seen();
  let shown: { key: string; id: string } | null = null;
  let timer: ReturnType<typeof setTimeout> | null = null;
  let serverGone = false;

  // JupyterLab cuts a notification at 140 characters: a longer notice links to the hub
  // home page, which shows it whole (JupyterLab's own command under JupyterHub).
  const showNotice = (n: INotice) => {
    if (n.kind === 'gpu-health' && !firstHealth(n.text)) {
      return; // the GPU panel's stream said it already
    }
    const more =
      n.text.length > NOTIFICATION_MAX && app.commands.hasCommand(HUB_COMMAND)
        ? [
            {
              label: 'Read it on the hub',
              displayType: 'link' as const,
              callback: () => void app.commands.execute(HUB_COMMAND)
            }
          ]
        : [];
    notify(n.level === 'info' ? 'info' : n.level === 'error' ? 'error' : 'warning', n.text, more);
  };

  const gone = () => {
    if (!serverGone) {
      serverGone = true;
      watchHubNotices(noticed, showNotice);
    }
  };

  const clear = () => {
    dismiss(shown?.id);
    shown = null;
  };

  app.commands.addCommand(KEEP_COMMAND, {
    label: 'Keep my GPU',
    caption: 'Hold off the idle-GPU culler',
    execute: async () => {
      const outcome = await keep(settings);
      clear();
      notify(outcome.ok ? 'success' : 'error', outcome.message);
      void poll();
    }
  });

  const poll = async (): Promise<void> => {
    if (timer) {
      clearTimeout(timer);
    }
    if (document.hidden) {
      // A background tab does not ask: through the proxy each answer would count as the
      // user being active (the GPU panel uses one open event stream instead).
      timer = setTimeout(poll, 5000);
      return;
    }
    let body: IWarnings;
    try {
      const r = await request<IWarnings>(settings, 'warnings');
      body = r.body;
      if (body.enabled === false) {
        return; // not under gpusessions: stop polling
      }
      if (!r.ok || typeof body.enabled !== 'boolean') {
        gone(); // this server does not answer any more (stopped): ask the hub why
        return;
      }
    } catch {
      gone();
      timer = setTimeout(poll, 60000);
      return;
    }
    for (const ev of body.lost_kernels || []) {
      if (lost.first(ev.at)) {
        notify('error', lostKernelsMessage(ev));
      }
    }
    for (const n of body.notices || []) {
      if (noticed.first(n.at)) {
        showNotice(n);
      }
    }
    const w = (body.warnings || [])[0];
    if (!w) {
      clear();
    } else if (!shown || shown.key !== warningKey(w)) {
      clear();
      shown = {
        key: warningKey(w),
        id: notify('warning', idleMessage(w), [
          {
            label: 'Keep my GPU',
            displayType: 'accent',
            callback: () => void app.commands.execute(KEEP_COMMAND)
          }
        ])
      };
    }
    timer = setTimeout(poll, (body.poll_seconds || 30) * 1000);
  };

  void app.restored.then(poll);
}

export const noticesPlugin: JupyterFrontEndPlugin<void> = {
  id: '@gpusessions/notices:plugin',
  description: 'Warns inside JupyterLab before gpusessions releases an idle GPU.',
  autoStart: true,
  activate
};
