"""finetune-workbench TUI: Textual screens and widgets that only call backend/."""
