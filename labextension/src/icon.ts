/** The Serving panel's icon: a small server rack with a play mark. */

import { LabIcon } from '@jupyterlab/ui-components';

const SVG = `<svg xmlns="http://www.w3.org/2000/svg" width="16" viewBox="0 0 24 24">
  <g class="jp-icon3" fill="#616161">
    <path d="M4 3h16a1 1 0 0 1 1 1v5a1 1 0 0 1-1 1H4a1 1 0 0 1-1-1V4a1 1 0 0 1 1-1zm2 2.5v2h2v-2H6z"/>
    <path d="M4 12h9v2H5v3h8v2H4a1 1 0 0 1-1-1v-5a1 1 0 0 1 1-1zm2 2.5v1.5h1.5v-1.5H6z"/>
    <path d="M15 12.5v9l7-4.5-7-4.5z"/>
  </g>
</svg>`;

export const servingIcon = new LabIcon({
  name: 'jupyter_serve:serving',
  svgstr: SVG
});
