/**
 * JupyterLab's notifications (the toasts at the bottom right).
 */
import { Notification } from '@jupyterlab/apputils';

/** Success and info pass after 8 s; warnings and errors stay until dismissed. */
export function notify(
  type: Notification.TypeOptions,
  message: string,
  actions: Notification.IAction[] = [],
  autoClose: number | false = type === 'success' ? 8000 : false
): string {
  return Notification.emit(message, type, { autoClose, actions });
}

export function dismiss(id: string | null | undefined): void {
  if (id) {
    Notification.dismiss(id);
  }
}
