"""Model folders on disk, on the tools' side (never shipped in a saved folder): atomic writes and output claims
(`atomic_io`), the folder reader (`checkpoint_files`, `json_limits`), the weights record and the crash-safe folder save
(`saved_model`), the generated code of a folder (`remote_code`), and `save` / `load`, which put them around a model's
own `save_pretrained` / `from_pretrained` (`model_folder`)."""
