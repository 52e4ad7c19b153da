/**
 * The side panel (left area, in JupyterLab and Notebook 7).
 */
import { JupyterFrontEnd } from '@jupyterlab/application';
import { Widget } from '@lumino/widgets';

import { gpuIcon } from './icon';
import { IPanelActions, renderPanel } from './render';
import { IReading } from './types';

export const PANEL_ID = 'gpusessions-gpu-panel';

export class GPUPanel extends Widget {
  constructor() {
    super();
    this.id = PANEL_ID;
    this.addClass('gpusessions-gpu-panel');
    this.title.caption = 'My GPU';
    this.title.icon = gpuIcon;
  }

  render(d: IReading, actions: IPanelActions): void {
    renderPanel(this.node, d, actions);
  }
}

export function addPanel(app: JupyterFrontEnd): GPUPanel {
  const panel = new GPUPanel();
  app.shell.add(panel, 'left', { rank: 1000 });
  return panel;
}
