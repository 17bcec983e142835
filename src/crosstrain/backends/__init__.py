"""The platforms: one package each (`azureml`, `vertex`, `aiplatform`, `databricks`), `local` and `fake`, over
the machinery they share in `base`. `crosstrain.registry` names them; nothing imports one platform from another."""
