# Excerpt of the notebook's "Submit hyperparameter tuning job using gcloud CLI" cell (GoogleCloudPlatform/vertex-ai-samples, Apache-2.0, Copyright Google LLC): the submit command, verbatim.
gcloud beta ai hp-tuning-jobs create \
   --config ./python_package/hptuning_job.yaml \
   --display-name $JOB_NAME \
   --algorithm algorithm-unspecified \
   --max-trial-count 5 \
   --parallel-trial-count 2 \
   --region=us-central1
