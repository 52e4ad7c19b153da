/**
 * The side panel's content, built from one reading (plain DOM: tested with jsdom).
 * The browser tests find it by these ids, classes and data-* attributes.
 */
import {
  deviceText,
  gib,
  keptText,
  keptUntilText,
  memory,
  panelWarning,
  releaseLabel,
  utilization
} from './format';
import { IReading } from './types';

export interface IPanelActions {
  keep: () => void;
  release: () => void;
  /** The last action's outcome, shown under the buttons. */
  message: string;
}

type Child = Node | string;

export function el(tag: string, attrs: Record<string, string> = {}, children: Child[] = []): HTMLElement {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    node.setAttribute(k, v);
  }
  for (const c of children) {
    node.appendChild(typeof c === 'string' ? document.createTextNode(c) : c);
  }
  return node;
}

function row(label: string, value: string, key: string): HTMLElement {
  return el('tr', { 'data-gpu-field': key }, [el('th', {}, [label]), el('td', {}, [value])]);
}

function kernels(d: IReading): HTMLElement {
  const ks = d.kernels;
  if (ks === null || ks === undefined) {
    return el('p', {}, [
      d.kernels_error || 'Kernels run in the notebook: their GPU memory is in the total above.'
    ]);
  }
  if (!ks.length) {
    return el('p', {}, ['No kernel is running.']);
  }
  return el(
    'table',
    { class: 'gpusessions-gpu-kernels' },
    ks.map(k =>
      el('tr', { 'data-kernel': k.id }, [
        el('td', {}, [k.path || k.name || k.id]),
        el('td', {}, [k.execution_state || '']),
        el('td', {}, [
          k.gpu_memory === null || k.gpu_memory === undefined ? '? GiB' : gib(k.gpu_memory) + ' GiB'
        ])
      ])
    )
  );
}

function button(label: string, kind: string, onclick: () => void): HTMLButtonElement {
  const b = el('button', { class: 'jp-Button jp-mod-styled ' + kind, type: 'button' }, [
    label
  ]) as HTMLButtonElement;
  b.onclick = onclick;
  return b;
}

/** Replaces `node`'s children with the panel for reading `d`. */
export function renderPanel(node: HTMLElement, d: IReading, actions: IPanelActions): void {
  const st = d.state || {};
  const sess = d.session || {};
  const mem = memory(d);
  const body: HTMLElement[] = [
    el('h2', {}, ['Your GPU']),
    el('table', { class: 'gpusessions-gpu-table' }, [
      row('Device', deviceText(d), 'device'),
      row('Node', sess.node || '?', 'node'),
      row('GPU memory', mem ? mem + ' in use' : '?', 'memory'),
      row('Utilization', utilization(d), 'utilization'),
      row('Kept across restarts', keptText(st.keep_on_stop), 'kept'),
      row('Claim', st.claim || sess.claim || '?', 'claim')
    ])
  ];
  if (st.health && !st.health.ok) {
    body.splice(
      1,
      0,
      el('p', { class: 'gpusessions-gpu-error', 'data-gpu-field': 'health', role: 'alert' }, [
        st.health.message
      ])
    );
  }
  const kept = keptUntilText(st.kept_until, st.kept_contended_until);
  if (kept) {
    body.push(el('p', { 'data-gpu-field': 'kept-until' }, [kept]));
  }
  if (d.agent_error) {
    body.push(el('p', { class: 'gpusessions-gpu-error' }, [d.agent_error]));
  }
  const restore = d.restore;
  if (restore && restore.state !== 'none' && restore.message) {
    const failed = restore.state === 'failed';
    body.push(
      el(
        'p',
        { 'data-gpu-field': 'restore', class: failed ? 'gpusessions-gpu-error' : '', role: 'status' },
        [restore.message]
      )
    );
  }
  if (st.error) {
    body.push(el('p', { class: 'gpusessions-gpu-error' }, ['The hub: ' + st.error]));
  }
  body.push(el('h3', {}, ['Kernels']), kernels(d), el('h3', {}, ['Idle GPU release']));
  body.push(
    st.warning
      ? el('p', { class: 'gpusessions-gpu-warning' }, [panelWarning(st.warning)])
      : el('p', {}, ['No warning: the GPU is not about to be released.'])
  );
  body.push(
    el('p', { class: 'gpusessions-gpu-buttons' }, [
      button('Keep my GPU', 'jp-mod-accept', actions.keep),
      ' ',
      button(releaseLabel(d.parks), 'jp-mod-warn', actions.release)
    ])
  );
  if (d.parks) {
    body.push(
      el('p', { 'data-gpu-field': 'parks' }, [
        'Park my session frees your GPU and keeps your variables: they come back in new kernels ' +
          'when you start again. An idle-GPU release parks them too.'
      ])
    );
  }
  if (actions.message) {
    body.push(el('p', { class: 'gpusessions-gpu-message', role: 'status' }, [actions.message]));
  }
  node.replaceChildren(...body);
}
