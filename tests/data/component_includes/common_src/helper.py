def helper_function():
    print("Hello from helper_function")
