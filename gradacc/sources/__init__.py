"""What a spec may name and where it is read from: uploaded files, fine-tuned models, data roots."""
