/**
 * The GPU's one-line summary: in JupyterLab's status bar, or in the top bar where there
 * is none (Notebook 7). A click opens the side panel.
 */
import { JupyterFrontEnd } from '@jupyterlab/application';
import { IStatusBar } from '@jupyterlab/statusbar';
import { Widget } from '@lumino/widgets';

import { gpuLine } from './format';
import { IReading } from './types';

export const STATUS_ITEM_ID = '@gpusessions/notices:gpu';

export class GPUStatusItem extends Widget {
  constructor(onClick: () => void) {
    super();
    this.addClass('gpusessions-gpu-status');
    this.node.onclick = onClick;
  }

  setReading(d: IReading): void {
    this.node.textContent = gpuLine(d);
    this.node.title = 'Your GPU: click for details';
  }
}

export function addStatusItem(
  app: JupyterFrontEnd,
  statusBar: IStatusBar | null,
  onClick: () => void
): GPUStatusItem {
  const item = new GPUStatusItem(onClick);
  if (statusBar) {
    statusBar.registerStatusItem(STATUS_ITEM_ID, { item, align: 'left', rank: 1000 });
  } else {
    // Notebook 7 has no status bar: the item goes to the top bar, by the title.
    item.addClass('gpusessions-gpu-top');
    app.shell.add(item, 'top', { rank: 900 });
  }
  return item;
}
