/**
 * gpusessions inside JupyterLab 4 and Notebook 7 (docs/jupyterlab.md):
 *
 * - notices: the culler's idle warning with "Keep my GPU", the hub's notices (why this
 *   server stopped) and lost kernels, as notifications;
 * - gpu: the GPU in the status bar and a side panel, with Keep and Release.
 */
import { JupyterFrontEndPlugin } from '@jupyterlab/application';

import { gpuPlugin } from './gpu';
import { noticesPlugin } from './notices';

const plugins: JupyterFrontEndPlugin<any>[] = [noticesPlugin, gpuPlugin];

export default plugins;
