/**
 * The extension's commands: one per action, usable from the palette (they ask
 * which model when not told), from the panel's buttons and from the file
 * browser's context menu.
 */

import { JupyterFrontEnd } from '@jupyterlab/application';
import {
  InputDialog,
  MainAreaWidget,
  WidgetTracker
} from '@jupyterlab/apputils';
import { IFileBrowserFactory } from '@jupyterlab/filebrowser';
import { Widget } from '@lumino/widgets';
import { ReadonlyPartialJSONObject } from '@lumino/coreutils';

import {
  ARCHIVE,
  IActionContext,
  registerUrl,
  reportError,
  scaleVersion,
  serveContentsItem,
  setDefaultVersion,
  splitKey,
  unregisterVersion
} from './actions';
import { CommandIDs } from './commandIds';
import { askRegisterOptions } from './forms';
import { servingIcon } from './icon';
import { missingFromStore } from './store';
import { ModelLogView } from './logview';
import { PANEL_ID } from './panel';
import { ChatView } from './chat';
import { modelKey } from './summary';
import { TryItView } from './tryit';

export interface IModelRef {
  modelName: string;
  modelVersion: string;
}

/** The model a command names in its args, else the one the user picks; null if cancelled. */
async function modelFrom(
  ctx: IActionContext,
  args: ReadonlyPartialJSONObject,
  what: string
): Promise<IModelRef | null> {
  const name = typeof args.name === 'string' ? args.name : '';
  const version = typeof args.version === 'string' ? args.version : '';
  if (name) {
    const known = ctx.model.summary?.models.find(
      m =>
        m.modelName === name &&
        (version ? m.modelVersion === version : m.isDefault)
    );
    return {
      modelName: name,
      modelVersion: version || known?.modelVersion || ''
    };
  }
  await ctx.model.refresh();
  const keys = (ctx.model.summary?.models ?? []).map(modelKey);
  if (keys.length === 0) {
    reportError(what, new Error('no model is registered'));
    return null;
  }
  const picked = await InputDialog.getItem({
    title: what,
    label: 'Model version',
    items: keys
  });
  if (!picked.button.accept || !picked.value) {
    return null;
  }
  const [modelName, modelVersion] = splitKey(picked.value);
  return { modelName, modelVersion };
}

/** Run an action and turn its failure into a notification. */
function guarded(what: string, action: () => Promise<unknown>): Promise<void> {
  return action().then(
    () => undefined,
    error => reportError(what, error)
  );
}

class Tabs {
  constructor(private _app: JupyterFrontEnd) {}

  open(id: string, make: () => Widget): void {
    let tab = this._tracker.find(widget => widget.content.id === id);
    if (tab === undefined) {
      const content = make();
      tab = new MainAreaWidget({ content });
      tab.id = `${id}-tab`;
      tab.title.label = content.title.label;
      tab.title.icon = servingIcon;
      tab.title.closable = true;
      void this._tracker.add(tab);
      this._app.shell.add(tab, 'main');
    }
    this._app.shell.activateById(tab.id);
  }

  private _tracker = new WidgetTracker<MainAreaWidget<Widget>>({
    namespace: 'jupyter-serve-tabs'
  });
}

/** Every command of the extension (the panel's, registering, and per model version). */
export function addCommands(
  app: JupyterFrontEnd,
  ctx: IActionContext,
  browser: IFileBrowserFactory | null
): void {
  addPanelCommands(app, ctx);
  addRegisterCommands(app, ctx, browser);
  addVersionCommands(app, ctx);
  addTabCommands(app, ctx);
}

function addPanelCommands(app: JupyterFrontEnd, ctx: IActionContext): void {
  const { commands } = app;
  const model = ctx.model;
  commands.addCommand(CommandIDs.openPanel, {
    label: 'Open the Serving Panel',
    caption: 'Show the models jupyter_serve is serving',
    icon: servingIcon,
    // After the layout is restored: Notebook 7 collapses its left area when it restores a
    // layout that had none, which would hide a panel opened before.
    execute: async () => {
      await app.restored;
      app.shell.activateById(PANEL_ID);
    }
  });
  commands.addCommand(CommandIDs.refresh, {
    label: 'Refresh the Serving Panel',
    execute: () => model.refresh()
  });
  commands.addCommand(CommandIDs.togglePause, {
    label: () =>
      model.paused ? 'Resume the Serving Refresh' : 'Pause the Serving Refresh',
    isToggled: () => model.paused,
    execute: () => model.togglePaused()
  });
}

function addRegisterCommands(
  app: JupyterFrontEnd,
  ctx: IActionContext,
  browser: IFileBrowserFactory | null
): void {
  const { commands } = app;
  commands.addCommand(CommandIDs.register, {
    label: 'Register a Model…',
    caption: 'Register an archive of the model store, a path or an allowed URL',
    execute: async args => {
      let url = typeof args.url === 'string' ? args.url : '';
      if (!url) {
        const answer = await InputDialog.getText({
          title: 'Register a model',
          label: 'Archive in the model store, path or URL',
          placeholder: 'demo.mar'
        });
        if (!answer.button.accept || !answer.value) {
          return;
        }
        url = answer.value.trim();
      }
      const missing = await missingFromStore(url);
      if (missing) {
        reportError(`Registering ${url} failed`, new Error(missing));
        return;
      }
      const options = await askRegisterOptions(url, ctx.defaults());
      if (options !== null) {
        await guarded(`Registering ${url} failed`, () =>
          registerUrl(ctx, url, options)
        );
      }
    }
  });
  commands.addCommand(CommandIDs.serveFile, {
    label: 'Serve this model',
    caption: 'Register this archive or model folder with jupyter_serve',
    icon: servingIcon,
    isVisible: () => selectedItem(browser) !== null,
    execute: async () => {
      const item = selectedItem(browser);
      if (item !== null) {
        await serveContentsItem(ctx, item.path, item.isDir);
      }
    }
  });
}

function addVersionCommands(app: JupyterFrontEnd, ctx: IActionContext): void {
  const { commands } = app;
  const model = ctx.model;
  commands.addCommand(CommandIDs.scale, {
    label: args => (args.name ? 'Scale' : 'Scale a Model…'),
    caption: 'Set the number of workers of a model version',
    execute: async args => {
      const ref = await modelFrom(ctx, args, 'Scale a model');
      if (ref === null) {
        return;
      }
      const current = model.find(modelKey(ref))?.workerCounts.target ?? 1;
      const answer = await InputDialog.getNumber({
        title: `Scale ${modelKey(ref)}`,
        label: 'Workers',
        value: current
      });
      if (answer.button.accept && answer.value !== null) {
        await guarded(`Scaling ${modelKey(ref)} failed`, () =>
          scaleVersion(ctx, ref, String(answer.value))
        );
      }
    }
  });
  commands.addCommand(CommandIDs.setDefault, {
    label: args => (args.name ? 'Set default' : 'Set the Default Version…'),
    caption: 'Make this version the one unversioned requests use',
    execute: async args => {
      const ref = await modelFrom(ctx, args, 'Set the default version');
      if (ref !== null) {
        await guarded(`Setting the default of ${ref.modelName} failed`, () =>
          setDefaultVersion(ctx, ref)
        );
      }
    }
  });
  commands.addCommand(CommandIDs.unregister, {
    label: args => (args.name ? 'Unregister' : 'Unregister a Model…'),
    caption: 'Stop the workers and unregister a model version',
    execute: async args => {
      const ref = await modelFrom(ctx, args, 'Unregister a model');
      if (ref !== null) {
        await guarded(`Unregistering ${modelKey(ref)} failed`, () =>
          unregisterVersion(ctx, ref)
        );
      }
    }
  });
}

function addTabCommands(app: JupyterFrontEnd, ctx: IActionContext): void {
  const { commands } = app;
  const tabs = new Tabs(app);
  commands.addCommand(CommandIDs.openLog, {
    label: args => (args.name ? 'Log' : 'Open a Model Log…'),
    caption: "Follow a model version's worker output in a tab",
    execute: async args => {
      const ref = await modelFrom(ctx, args, 'Open a model log');
      if (ref !== null) {
        tabs.open(
          `jupyter-serve-log-${ref.modelName}-${ref.modelVersion}`,
          () => new ModelLogView(ref.modelName, ref.modelVersion)
        );
      }
    }
  });
  commands.addCommand(CommandIDs.tryIt, {
    label: args => (args.name ? 'Try it' : 'Try a Model…'),
    caption:
      'Send a request to a model version and see its answer (chat with a language model)',
    execute: async args => {
      const ref = await modelFrom(ctx, args, 'Try a model');
      if (ref !== null && ctx.model.find(modelKey(ref))?.languageModel) {
        tabs.open(
          `jupyter-serve-chat-${ref.modelName}-${ref.modelVersion}`,
          () => new ChatView(ref.modelName, ref.modelVersion)
        );
      } else if (ref !== null) {
        tabs.open(
          `jupyter-serve-try-${ref.modelName}-${ref.modelVersion}`,
          () =>
            new TryItView(ref.modelName, ref.modelVersion, async () => {
              await ctx.model.refresh(); // the versions served now
              return (ctx.model.summary?.models ?? []).map(modelKey);
            })
        );
      }
    }
  });
}

/** The file browser's selected item when it is something the server can serve. */
function selectedItem(
  browser: IFileBrowserFactory | null
): { path: string; isDir: boolean } | null {
  const widget = browser?.tracker.currentWidget;
  const item = widget?.selectedItems().next();
  if (!item || item.done || !item.value) {
    return null;
  }
  const value = item.value;
  const isDir = value.type === 'directory';
  return isDir || ARCHIVE.test(value.path) ? { path: value.path, isDir } : null;
}

/** The commands the palette lists, in order. */
export const PALETTE = [
  CommandIDs.openPanel,
  CommandIDs.refresh,
  CommandIDs.togglePause,
  CommandIDs.register,
  CommandIDs.scale,
  CommandIDs.setDefault,
  CommandIDs.unregister,
  CommandIDs.openLog,
  CommandIDs.tryIt
];
