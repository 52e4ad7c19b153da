/**
 * "Keep my GPU": holds off the culler (POST <base>/gpusessions/keep, relayed to the hub).
 */
import { ServerConnection } from '@jupyterlab/services';

import { request } from './api';
import { IKeepReply, IOutcome, keepOutcome } from './outcomes';

export const KEEP_COMMAND = 'gpusessions:keep';

export async function keep(settings: ServerConnection.ISettings): Promise<IOutcome> {
  return keepOutcome(await request<IKeepReply>(settings, 'keep', 'POST'));
}
