import { LabIcon } from '@jupyterlab/ui-components';

/** The side panel's tab: a chip. */
export const gpuIcon = new LabIcon({
  name: 'gpusessions:gpu',
  svgstr:
    '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 24 24">' +
    '<path class="jp-icon3" fill="#616161" d="M4 6h16v12H4z M2 9h2v2H2z M2 13h2v2H2z M20 9h2v2h-2z M20 13h2v2h-2z"/>' +
    '<path fill="white" d="M7 9h10v6H7z"/></svg>'
});
