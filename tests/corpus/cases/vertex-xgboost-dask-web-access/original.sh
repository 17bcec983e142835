# Cells 57 and 59 of notebooks/official/training/xgboost_data_parallel_training_on_cpu_using_dask.ipynb
# (Apache-2.0, Copyright Google LLC): the gcloud line, verbatim; config.yaml beside it is the file cell 57 writes,
# with its $1 and $2 filled in.
! gcloud ai custom-jobs create --region=us-central1 --config=config.yaml --display-name={display_name}
