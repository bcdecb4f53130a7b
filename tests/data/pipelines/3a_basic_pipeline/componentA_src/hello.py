print("Hello from component A")
