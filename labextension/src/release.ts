/**
 * "Release my GPU" ("Park my session" where the kernels are parked): asks first, then POST <base>/gpusessions/gpu/release (relayed to the
 * hub, which stops this server and deletes the holder and the claim).
 */
import { Dialog, showDialog } from '@jupyterlab/apputils';
import { ServerConnection } from '@jupyterlab/services';

import { request } from './api';
import { PARK_QUESTION, RELEASE_QUESTION, releaseLabel } from './format';
import { IOutcome, releaseOutcome } from './outcomes';
import { IReply } from './types';

/** `parks`: the kernels are parked, not ended ("Park my session: free my GPU, keep my variables"). */
export async function confirmRelease(parks = false): Promise<boolean> {
  const result = await showDialog({
    title: releaseLabel(parks),
    body: parks ? PARK_QUESTION : RELEASE_QUESTION,
    buttons: [Dialog.cancelButton(), Dialog.warnButton({ label: parks ? 'Park' : 'Release' })]
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
