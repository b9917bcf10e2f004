"""The spreadout family: knn_classes, spreadout_loss, private label sets and the nn modules."""
