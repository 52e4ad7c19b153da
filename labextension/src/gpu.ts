/**
 * The GPU in JupyterLab and Notebook 7: a status bar item (the top bar in Notebook 7) and a
 * side panel with Keep and Release, fed by one event stream (<base>/gpusessions/gpu/events;
 * see docs/jupyterlab.md: the browser does not poll, and an open stream is not activity).
 */
import { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { ServerConnection } from '@jupyterlab/services';
import { IStatusBar } from '@jupyterlab/statusbar';

import { hubInfo, IEventStream, openEventStream } from './api';
import { releaseLabel } from './format';
import { keep } from './keep';
import { notify } from './notify';
import { addPanel, GPUPanel, PANEL_ID } from './panel';
import { confirmRelease, release } from './release';
import { firstHealth } from './seen';
import { parseReading } from './sse';
import { addStatusItem, GPUStatusItem } from './statusitem';
import { IReading } from './types';

function hubHome(): string {
  const hub = hubInfo();
  return (hub?.hubHost || '') + (hub?.hubPrefix || '/hub/') + 'home';
}

function activate(app: JupyterFrontEnd, statusBar: IStatusBar | null): void {
  const settings: ServerConnection.ISettings = app.serviceManager.serverSettings;
  let last: IReading | null = null;
  let restoreSaid = '';
  let message = '';
  let panel: GPUPanel | null = null;
  let item: GPUStatusItem | null = null;

  const render = () => {
    if (!last || !panel || !item) {
      return;
    }
    item.setReading(last);
    panel.render(last, { keep: () => void keepGPU(), release: () => void releaseGPU(), message });
  };

  // The outcome stays in the panel and pops up as a notification.
  const say = (text: string, type: 'success' | 'info' | 'error') => {
    message = text;
    render();
    notify(type, text, [], type === 'error' ? false : 8000);
  };

  const keepGPU = async () => {
    const outcome = await keep(settings);
    say(outcome.message, outcome.ok ? 'success' : 'error');
  };

  const releaseGPU = async () => {
    const parks = !!last?.parks;
    if (!(await confirmRelease(parks))) {
      return;
    }
    message = parks ? 'Parking your session ...' : 'Releasing your GPU ...';
    render();
    const outcome = await release(settings);
    if (outcome.ok) {
      stream.close();
      say(outcome.message, 'info');
      setTimeout(() => {
        window.location.href = hubHome();
      }, 3000);
    } else {
      say(outcome.message, 'error');
    }
  };

  // The item and the panel appear with the first reading of a gpusessions GPU server.
  const show = (d: IReading) => {
    last = d;
    const restore = d.restore;
    const said = ['restored', 'failed', 'expired'];
    if (restore && said.includes(restore.state) && restore.message) {
      if (restore.message !== restoreSaid) {
        // Once per outcome: what came back of the parked session, and what did not.
        restoreSaid = restore.message;
        notify(restore.state === 'failed' ? 'error' : 'info', restore.message, [], false);
      }
    }
    const health = d.state?.health;
    if (health && !health.ok && firstHealth(health.message)) {
      // A broken GPU is said at once (the stream's next reading), with Release at hand.
      notify('error', health.message, [
        { label: releaseLabel(d.parks), displayType: 'warn', callback: () => void releaseGPU() }
      ]);
    }
    if (!panel) {
      panel = addPanel(app);
      item = addStatusItem(app, statusBar, () => app.shell.activateById(PANEL_ID));
    }
    render();
  };

  const stream = openEventStream(settings, 'gpu/events', (data: string, s: IEventStream) => {
    const d = parseReading(data);
    if (!d) {
      return;
    }
    if (!d.enabled) {
      s.close(); // not a gpusessions GPU server: no item
      return;
    }
    show(d);
  });
}

export const gpuPlugin: JupyterFrontEndPlugin<void> = {
  id: '@gpusessions/notices:gpu',
  description: 'Shows your GPU in the status bar and a side panel; Keep and Release it.',
  autoStart: true,
  // Notebook 7 has no status bar: the item then goes to its top bar.
  optional: [IStatusBar],
  activate
};
