/** The ids of the extension's commands (palette, menus, buttons). */

export namespace CommandIDs {
  export const openPanel = 'jupyter-serve:open-panel';
  export const refresh = 'jupyter-serve:refresh';
  export const togglePause = 'jupyter-serve:toggle-refresh';
  export const register = 'jupyter-serve:register';
  export const serveFile = 'jupyter-serve:serve-file';
  export const scale = 'jupyter-serve:scale';
  export const setDefault = 'jupyter-serve:set-default';
  export const unregister = 'jupyter-serve:unregister';
  export const openLog = 'jupyter-serve:open-log';
  export const tryIt = 'jupyter-serve:try-it';
}
