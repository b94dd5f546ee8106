print("portcullis")
