// node --test web/ui/src/: the command-mode keys and their sequences.
import { test } from "node:test";
import assert from "node:assert/strict";
import { CommandKeys, SHORTCUTS } from "./keys.js";

const ev = (key, mods = {}, timeStamp = 0) => ({ key, timeStamp, altKey: false, ctrlKey: false, metaKey: false, shiftKey: false, repeat: false, ...mods });

test("single keys name their actions; Shift with J, K, the arrows or M extends or merges; other letters with Shift or Ctrl are left alone", () => {
  const k = new CommandKeys();
  assert.equal(k.action(ev("a")), "insert-above");
  assert.equal(k.action(ev("b")), "insert-below");
  assert.equal(k.action(ev("B", { shiftKey: true })), "");
  assert.equal(k.action(ev("m")), "to-markdown");
  assert.equal(k.action(ev("y")), "to-code");
  assert.equal(k.action(ev("z")), "undo-delete");
  assert.equal(k.action(ev("j")), "select-next");
  assert.equal(k.action(ev("J", { shiftKey: true })), "extend-next");
  assert.equal(k.action(ev("K", { shiftKey: true })), "extend-prev");
  assert.equal(k.action(ev("ArrowDown", { shiftKey: true })), "extend-next");
  assert.equal(k.action(ev("ArrowUp", { shiftKey: true })), "extend-prev");
  assert.equal(k.action(ev("M", { shiftKey: true })), "merge");
  assert.equal(k.action(ev("D", { shiftKey: true })), "");
  assert.equal(k.action(ev("ArrowUp")), "select-prev");
  assert.equal(k.action(ev("h")), "shortcuts");
  assert.equal(k.action(ev("?", { shiftKey: true })), "shortcuts");
  assert.equal(k.action(ev("c", { ctrlKey: true })), "");
  assert.equal(k.action(ev("q")), "");
});

test("Enter edits; with one modifier it runs", () => {
  const k = new CommandKeys();
  assert.equal(k.action(ev("Enter")), "edit");
  assert.equal(k.action(ev("Enter", { shiftKey: true })), "run-advance");
  assert.equal(k.action(ev("Enter", { ctrlKey: true })), "run");
  assert.equal(k.action(ev("Enter", { metaKey: true })), "run");
  assert.equal(k.action(ev("Enter", { altKey: true })), "run-insert");
  assert.equal(k.action(ev("Enter", { altKey: true, shiftKey: true })), "");
});

test("D D, I I and 0 0 within a second; another key, a late one or a held key breaks the pair", () => {
  const k = new CommandKeys();
  assert.equal(k.action(ev("d", {}, 0)), "pending");
  assert.equal(k.action(ev("d", {}, 500)), "delete");
  assert.equal(k.action(ev("d", {}, 600)), "pending");
  assert.equal(k.action(ev("d", {}, 1700)), "pending");
  assert.equal(k.action(ev("j", {}, 1800)), "select-next");
  assert.equal(k.action(ev("d", {}, 1900)), "pending");
  assert.equal(k.action(ev("i", {}, 2000)), "pending");
  assert.equal(k.action(ev("i", {}, 2100)), "interrupt");
  assert.equal(k.action(ev("0", {}, 3000)), "pending");
  assert.equal(k.action(ev("0", { repeat: true }, 3030)), "pending");
  assert.equal(k.action(ev("0", {}, 3300)), "restart");
});

test("the shortcuts list names every command key", () => {
  const listed = SHORTCUTS.flatMap((g) => g.keys.flatMap(([keys]) => keys)).join(" ");
  for (const k of ["Enter", "Shift-Enter", "Ctrl-Enter", "Alt-Enter", "A", "B", "D D", "Z", "M", "Y", "J", "K", "I I", "0 0", "H", "?", "Esc"]) {
    assert.ok(listed.includes(k), k);
  }
});
