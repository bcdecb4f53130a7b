print("hello from a pipeline batch deployment")
