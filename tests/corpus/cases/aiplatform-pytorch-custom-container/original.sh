# Excerpt of pytorch/containers/custom_container/README.md (GoogleCloudPlatform/cloudml-samples, Apache-2.0, Copyright Google LLC): the command block, verbatim.
gcloud beta ml-engine jobs submit training $JOB_NAME \
  --region $REGION \
  --master-image-uri $IMAGE_URI \
  --scale-tier BASIC \
  -- \
  --model-dir=$BUCKET_ID \
  --epochs=10
