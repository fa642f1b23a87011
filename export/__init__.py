"""SavedModel / TFLite export of trained policies; imported as `sit_keras.export`."""
