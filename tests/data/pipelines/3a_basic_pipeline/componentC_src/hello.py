print("Hello from component C")
