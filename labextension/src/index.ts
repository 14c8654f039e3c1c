/**
 * jupyter_serve's JupyterLab (and Notebook 7) extension: the "Serving" left
 * panel, its commands in the palette and the file browser's context menu, a
 * status-bar item and the settings (refresh interval, register defaults).
 */

import {
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { ICommandPalette, Notification } from '@jupyterlab/apputils';
import { IFileBrowserFactory } from '@jupyterlab/filebrowser';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { IStatusBar } from '@jupyterlab/statusbar';

import { IActionContext } from './actions';
import { CommandIDs } from './commandIds';
import { PALETTE, addCommands } from './commands';
import { IRegisterDefaults } from './forms';
import { servingIcon } from './icon';
import { DEFAULT_INTERVAL_SECONDS, ServingModel } from './model';
import { PANEL_ID, ServingPanel } from './panel';
import { ServingStatus } from './statusbar';

const PLUGIN_ID = 'jupyter_serve:plugin';
const MAR_TYPE = 'jupyter-serve-mar';
const CATEGORY = 'Serving';

const plugin: JupyterFrontEndPlugin<void> = {
  id: PLUGIN_ID,
  description: 'A Serving side panel for jupyter_serve.',
  autoStart: true,
  optional: [
    ICommandPalette,
    IFileBrowserFactory,
    IStatusBar,
    ISettingRegistry,
    ILayoutRestorer
  ],
  activate: (
    app: JupyterFrontEnd,
    palette: ICommandPalette | null,
    browser: IFileBrowserFactory | null,
    statusBar: IStatusBar | null,
    settingRegistry: ISettingRegistry | null,
    restorer: ILayoutRestorer | null
  ) => {
    const model = new ServingModel();
    const defaults: IRegisterDefaults = {
      workers: 1,
      batchSize: 1,
      maxBatchDelay: 100
    };
    const ctx: IActionContext = {
      model,
      defaults: () => defaults,
      openLog: (name, version) =>
        void app.commands.execute(CommandIDs.openLog, { name, version })
    };
    addCommands(app, ctx, browser);
    for (const command of PALETTE) {
      palette?.addItem({ command, category: CATEGORY });
    }
    addFileBrowserMenu(app);

    const panel = new ServingPanel(model, app.commands);
    panel.title.icon = servingIcon;
    panel.title.label = 'Serving'; // Notebook 7 lists side panels by label (View > Left Sidebar)
    app.shell.add(panel, 'left', { rank: 600 });
    restorer?.add(panel, PANEL_ID);

    statusBar?.registerStatusItem(`${PLUGIN_ID}:status`, {
      item: new ServingStatus(
        model,
        () => void app.commands.execute(CommandIDs.openPanel)
      ),
      align: 'left',
      rank: 50
    });
    warnWhenUnreadable(model);

    if (settingRegistry) {
      void settingRegistry.load(PLUGIN_ID).then(
        settings => {
          const apply = (): void => {
            model.interval =
              Number(settings.get('refreshInterval').composite) ||
              DEFAULT_INTERVAL_SECONDS;
            defaults.workers = Number(settings.get('defaultWorkers').composite);
            defaults.batchSize = Number(
              settings.get('defaultBatchSize').composite
            );
            defaults.maxBatchDelay = Number(
              settings.get('defaultMaxBatchDelay').composite
            );
          };
          apply();
          settings.changed.connect(apply);
          model.start();
          if (settings.get('openOnStart').composite === true) {
            void app.commands.execute(CommandIDs.openPanel);
          }
        },
        () => model.start()
      );
    } else {
      model.start();
    }
  }
};

/** "Serve this model" on `.mar` files and folders (other archives: by their type). */
function addFileBrowserMenu(app: JupyterFrontEnd): void {
  app.docRegistry.addFileType({
    name: MAR_TYPE,
    displayName: 'Model archive (.mar)',
    extensions: ['.mar'],
    mimeTypes: ['application/zip'],
    contentType: 'file',
    fileFormat: 'base64',
    icon: servingIcon
  });
  for (const selector of [
    `.jp-DirListing-item[data-file-type="${MAR_TYPE}"]`,
    '.jp-DirListing-item[data-isdir="true"]'
  ]) {
    app.contextMenu.addItem({
      command: CommandIDs.serveFile,
      selector,
      rank: 3
    });
  }
}

/** One notification when the panel loses the server (the panel shows the details). */
function warnWhenUnreadable(model: ServingModel): void {
  model.errorChanged.connect((_, error) => {
    if (error !== null) {
      Notification.warning(`Serving panel: cannot read the server: ${error}`, {
        autoClose: 8000
      });
    }
  });
}

export default plugin;
