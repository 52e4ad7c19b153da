import { clock, gpuLine } from '../format';
import { renderPanel } from '../render';
import { IReading } from '../types';

const GIB = Math.pow(2, 30);
const reading: IReading = {
  enabled: true,
  session: { gpu: 'MIG 1g.10gb', node: 'n3', claim: 'gpu-wes', devices: ['pool-a/mig-0'] },
  state: { keep_on_stop: true, claim: 'gpu-wes' },
  summary: { memory_used: 2.1 * GIB, memory_total: 9.8 * GIB },
  devices: [{ activity: null }],
  kernels: [
    { id: 'k1', name: 'python3', path: 'train.ipynb', execution_state: 'idle', gpu_memory: 2.1 * GIB },
    { id: 'k2', name: 'python3', path: '', execution_state: 'busy', gpu_memory: null }
  ]
};

function panel(d: IReading, message = '') {
  const node = document.createElement('div');
  const calls: string[] = [];
  renderPanel(node, d, { keep: () => calls.push('keep'), release: () => calls.push('release'), message });
  const field = (key: string) => node.querySelector(`[data-gpu-field="${key}"]`)?.textContent;
  return { node, calls, field };
}

describe('the side panel', () => {
  it('shows each field where the browser test looks', () => {
    const { field } = panel(reading);
    expect(field('device')).toBe('DeviceMIG 1g.10gb (pool-a/mig-0)');
    expect(field('node')).toBe('Noden3');
    expect(field('memory')).toBe('GPU memory2.1 / 9.8 GiB in use');
    expect(field('utilization')).toBe('Utilizationnot reported for this device (NVML cannot tell)');
    expect(field('kept')).toBe('Kept across restartsyes: stopping the server keeps this GPU for you');
    expect(field('claim')).toBe('Claimgpu-wes');
    expect(field('kept-until')).toBeUndefined();
  });
  it('lists each kernel with its notebook and GPU memory', () => {
    const { node } = panel(reading);
    const cells = (id: string) =>
      Array.from(node.querySelectorAll(`[data-kernel="${id}"] td`)).map(td => td.textContent);
    expect(cells('k1')).toEqual(['train.ipynb', 'idle', '2.1 GiB']);
    expect(cells('k2')).toEqual(['python3', 'busy', '? GiB']);
  });
  it('says where kernels are when they are not in the holder', () => {
    expect(panel({ ...reading, kernels: null }).node.textContent).toContain(
      'Kernels run in the notebook: their GPU memory is in the total above.'
    );
    expect(panel({ ...reading, kernels: null, kernels_error: 'the kernel host does not answer' }).node.textContent).toContain(
      'the kernel host does not answer'
    );
    expect(panel({ ...reading, kernels: [] }).node.textContent).toContain('No kernel is running.');
  });
  it("shows the culler's warning, or that there is none", () => {
    const cull = 1_800_000_000;
    const warned = panel({ ...reading, state: { keep_on_stop: true, warning: { cull_at: cull, reason: 'idle 2 h' } } });
    expect(warned.node.querySelector('.gpusessions-gpu-warning')?.textContent).toBe(
      'This GPU and its notebook look idle: it will be released at ' + clock(cull) + ' (idle 2 h).'
    );
    const quiet = panel(reading);
    expect(quiet.node.querySelector('.gpusessions-gpu-warning')).toBeNull();
    expect(quiet.node.textContent).toContain('No warning: the GPU is not about to be released.');
  });
  it('shows a keep in force', () => {
    const until = 1_800_000_000;
    const { field } = panel({ ...reading, state: { keep_on_stop: true, kept_until: until } });
    expect(field('kept-until')).toBe('Kept: yes, and held off the culler until ' + clock(until) + '.');
  });
  it("shows the agent's and the hub's errors", () => {
    const { node } = panel({ ...reading, agent_error: 'The GPU agent does not answer (timeout).', state: { error: 'not under JupyterHub' } });
    expect(Array.from(node.querySelectorAll('.gpusessions-gpu-error')).map(p => p.textContent)).toEqual([
      'The GPU agent does not answer (timeout).',
      'The hub: not under JupyterHub'
    ]);
  });
  it('has Keep and Release buttons', () => {
    const { node, calls } = panel(reading);
    const buttons = Array.from(node.querySelectorAll('.gpusessions-gpu-buttons button')) as HTMLButtonElement[];
    expect(buttons.map(b => b.textContent)).toEqual(['Keep my GPU', 'Release my GPU']);
    buttons[0].click();
    buttons[1].click();
    expect(calls).toEqual(['keep', 'release']);
  });
  it('offers Park my session where the kernels are parked, and says what it keeps', () => {
    const { node, field } = panel({ ...reading, parks: true });
    const buttons = Array.from(node.querySelectorAll('.gpusessions-gpu-buttons button')) as HTMLButtonElement[];
    expect(buttons.map(b => b.textContent)).toEqual(['Keep my GPU', 'Park my session']);
    expect(field('parks')).toContain('frees your GPU and keeps your variables');
    expect(panel(reading).node.querySelector('[data-gpu-field=parks]')).toBeNull();
  });
  it("shows the parked session's restore, a failed one as an error", () => {
    const said = 'Restored your session from 14:02 UTC: 3 variables, 1 not kept (f: open file)';
    const ok = panel({ ...reading, restore: { state: 'restored', message: said } });
    expect(ok.field('restore')).toBe(said);
    expect(ok.node.querySelector('[data-gpu-field=restore]')?.className).toBe('');
    const bad = panel({ ...reading, restore: { state: 'failed', message: 'Could not restore: disk full' } });
    expect(bad.node.querySelector('[data-gpu-field=restore]')?.className).toBe('gpusessions-gpu-error');
    expect(panel({ ...reading, restore: { state: 'none' } }).node.querySelector('[data-gpu-field=restore]')).toBeNull();
  });
  it("shows the last action's outcome", () => {
    expect(panel(reading).node.querySelector('.gpusessions-gpu-message')).toBeNull();
    const msg = panel(reading, 'Your GPU is kept until 15:05.').node.querySelector('.gpusessions-gpu-message');
    expect(msg?.textContent).toBe('Your GPU is kept until 15:05.');
    expect(msg?.getAttribute('role')).toBe('status');
  });
  it('replaces what it showed before', () => {
    const node = document.createElement('div');
    const actions = { keep: () => undefined, release: () => undefined, message: '' };
    renderPanel(node, reading, actions);
    renderPanel(node, { ...reading, session: { ...reading.session, node: 'n4' } }, actions);
    expect(node.querySelectorAll('h2')).toHaveLength(1);
    expect(node.querySelector('[data-gpu-field="node"] td')?.textContent).toBe('n4');
  });
});

describe('a broken GPU', () => {
  const message =
    'Your GPU reported a fatal error (XID 79); save your work: Release and start again to get a healthy GPU.';
  it('is said first in the panel and in the status line', () => {
    const broken = { ...reading, state: { ...reading.state, health: { ok: false, message } } };
    const { node, field } = panel(broken);
    expect(field('health')).toBe(message);
    expect(node.querySelector('h2')?.nextElementSibling?.getAttribute('data-gpu-field')).toBe('health');
    expect(gpuLine(broken)).toContain('GPU FAILED');
  });
  it('says nothing while the GPU is healthy', () => {
    const healthy = { ...reading, state: { ...reading.state, health: { ok: true, message: '' } } };
    expect(panel(healthy).field('health')).toBeUndefined();
    expect(gpuLine(healthy)).not.toContain('FAILED');
  });
});
