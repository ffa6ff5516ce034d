"""What an uploaded file must be: the streamed receive, the format checks, the dataset checks."""
