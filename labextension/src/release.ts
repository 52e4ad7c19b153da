/**
 * "Release my GPU": asks first, then POST <base>/gpusessions/gpu/release (relayed to the
 * hub, which stops this server and deletes the holder and the claim).
 */
import { Dialog, showDialog } from '@jupyterlab/apputils';
import { ServerConnection } from '@jupyterlab/services';

import { request } from './api';
import { RELEASE_QUESTION } from './format';
import { IOutcome, releaseOutcome } from './outcomes';
import { IReply } from './types';

export async function confirmRelease(): Promise<boolean> {
  const result = await showDialog({
    title: 'Release my GPU',
    body: RELEASE_QUESTION,
    buttons: [Dialog.cancelButton(), Dialog.warnButton({ label: 'Release' })]
  });
  return result.button.accept;
}

export async function release(settings: ServerConnection.ISettings): Promise<IOutcome> {
  let r: IReply<{ message?: string }>;
  try {
    r = await request(settings, 'gpu/release', 'POST');
  } catch {
    r = { ok: false, status: 0, body: {} }; // the server stopped under the request
  }
  return releaseOutcome(r);
}
