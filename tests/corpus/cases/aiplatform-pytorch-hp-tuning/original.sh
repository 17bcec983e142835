# Excerpt of pytorch/containers/hp_tuning/README.md (GoogleCloudPlatform/cloudml-samples, Apache-2.0, Copyright Google LLC): the submit command block, verbatim.
gcloud alpha ml-engine jobs submit training $JOB_NAME \
  --job-dir=$JOB_DIR \
  --region=$REGION \
  --config=hptuning_config.yaml
